"""A command given as one line is split as `shlex.split` splits it (the same words, or the same ValueError),
in linear time, and bounded before it is split."""
from __future__ import annotations

import shlex
import time

import pytest
from hypothesis import given, settings, strategies as st

from workloads.shell import MAX_COMMAND_ARGS, MAX_COMMAND_CHARS, CommandError, command_from, split

# The characters the rules are about, often; any other character too.
SHELLISH = st.sampled_from(list(" \t\r\n'\"\\") + list("ab$#;|&*~=-"))
TEXT = st.text(alphabet=st.one_of(SHELLISH, SHELLISH, st.characters(codec="utf-8")), max_size=60)


def _shlex(text):
    try:
        return shlex.split(text), None
    except ValueError as exc:
        return None, str(exc)


def _ours(text):
    try:
        return split(text), None
    except ValueError as exc:
        return None, str(exc)


@settings(max_examples=3000, derandomize=True, database=None, deadline=None)
@given(TEXT)
def test_split_agrees_with_shlex_on_any_text(text):
    assert _ours(text) == _shlex(text)


@pytest.mark.parametrize("text,words", [
    ("python train.py --epochs 3", ["python", "train.py", "--epochs", "3"]),
    ("echo 'a b' \"c d\" e\\ f", ["echo", "a b", "c d", "e f"]),
    ("a '' \"\" b", ["a", "", "", "b"]),
    ('"a \\" \\\\ \\x"', ['a " \\ \\x']),
    ("'no \\escape'", ["no \\escape"]),
    ("a\\\nb", ["a\nb"]),
])
def test_split_examples(text, words):
    assert split(text) == words == shlex.split(text)


def _best_of_three(fn) -> float:
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - started)
    return best


def test_split_is_linear_where_shlex_is_quadratic():
    """Ten times the text costs about ten times the time (shlex.split: one word of 1 MB took 7.5 s)."""
    for make in (lambda n: "a" * n, lambda n: "'" + "a" * n + "'", lambda n: "a " * (n // 2)):
        small = _best_of_three(lambda: split(make(200_000)))
        large = _best_of_three(lambda: split(make(2_000_000)))
        assert large < 30 * small + 0.05, (small, large)
    assert _best_of_three(lambda: split("a" * 10_000_000)) < 1.0


def test_a_command_is_bounded_before_it_is_split():
    assert command_from("python train.py") == ["python", "train.py"]
    assert command_from(["python", "a b"]) == ["python", "a b"]
    assert command_from("") == [] and command_from(None) == []
    with pytest.raises(CommandError, match=f"The command is {MAX_COMMAND_CHARS + 1} characters long: at most "):
        command_from("a" * (MAX_COMMAND_CHARS + 1))
    with pytest.raises(CommandError, match=f"at most {MAX_COMMAND_CHARS}"):
        command_from(["a" * MAX_COMMAND_CHARS, "b"])
    with pytest.raises(CommandError, match=f"words: at most {MAX_COMMAND_ARGS}"):
        command_from("a " * (MAX_COMMAND_ARGS + 1))
    with pytest.raises(CommandError, match="No closing quotation"):
        command_from("echo 'unterminated")
    with pytest.raises(CommandError, match="list of strings or one line of text"):
        command_from(["python", 3])
