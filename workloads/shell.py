"""A researcher's command: one line split as a POSIX shell would (`shlex.split`'s rules), in linear time,
and bounded.

`shlex.split` builds each word by appending one character at a time to a string (`self.token +=
nextchar`), which copies the word so far: a single word of n characters costs O(n²) (a 1 MB word took
7.5 s, 10 MB no answer in a minute). `split` gives the same words by the same rules — whitespace is
space, tab, CR and LF; single quotes keep everything literally; inside double quotes a backslash escapes
only `"` and `\\` (any other pair is kept as written); outside quotes a backslash escapes any character;
`''` and `""` are empty words; no comments — scanning runs of plain characters with regular
expressions and joining each word's pieces once. tests/workloads/test_shell.py proves with Hypothesis
that it agrees with `shlex.split` (words, or the same ValueError) on any text.

`command_from` is the one rule for a command given as a line or as a list: at most MAX_COMMAND_CHARS
characters (checked before splitting) and MAX_COMMAND_ARGS words. No Django import.
"""
from __future__ import annotations

import re
from typing import Any

# Linux refuses one argument over 128 KiB (MAX_ARG_STRLEN) and a Job over 1.5 MiB is refused by the API
# server; a command line is far shorter than either.
MAX_COMMAND_CHARS = 65536
MAX_COMMAND_ARGS = 4096

_WHITESPACE_RUN = re.compile(r"[ \t\r\n]+")
_PLAIN_RUN = re.compile(r"[^ \t\r\n'\"\\]+")
_DOUBLE_QUOTED_SPECIAL = re.compile(r'["\\]')


def split(text: str) -> list[str]:
    """The words of `text` as `shlex.split(text)` gives them (same ValueError messages), in linear time."""
    words: list[str] = []
    pieces: list[str] | None = None  # the current word's pieces; None between words
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c in " \t\r\n":
            if pieces is not None:
                words.append("".join(pieces))
                pieces = None
            i = _WHITESPACE_RUN.match(text, i).end()
            continue
        if pieces is None:
            pieces = []
        if c == "'":
            end = text.find("'", i + 1)
            if end < 0:
                raise ValueError("No closing quotation")
            pieces.append(text[i + 1:end])
            i = end + 1
        elif c == '"':
            j = i + 1
            while True:
                found = _DOUBLE_QUOTED_SPECIAL.search(text, j)
                if found is None:
                    raise ValueError("No closing quotation")
                k = found.start()
                pieces.append(text[j:k])
                if text[k] == '"':
                    i = k + 1
                    break
                if k + 1 >= n:  # a backslash ends the text inside double quotes
                    raise ValueError("No escaped character")
                escaped = text[k + 1]
                pieces.append(escaped if escaped in '"\\' else "\\" + escaped)
                j = k + 2
        elif c == "\\":
            if i + 1 >= n:
                raise ValueError("No escaped character")
            pieces.append(text[i + 1])
            i += 2
        else:
            run = _PLAIN_RUN.match(text, i)
            pieces.append(run.group())
            i = run.end()
    if pieces is not None:
        words.append("".join(pieces))
    return words


class CommandError(ValueError):
    """A command that cannot be taken: too long, too many words, unreadable, or not text."""


def command_from(value: Any) -> list[str]:
    """The command's words from one line of text (split as a shell would) or a list of strings.

    Raises CommandError saying which rule it breaks; the length is checked before any splitting."""
    if value is None or value == "":
        return []
    if isinstance(value, str):
        if len(value) > MAX_COMMAND_CHARS:
            raise CommandError(f"The command is {len(value)} characters long: at most {MAX_COMMAND_CHARS}.")
        try:
            words = split(value)
        except ValueError as exc:
            raise CommandError(f"The command cannot be read as a shell line: {exc}.") from exc
    elif isinstance(value, (list, tuple)) and all(isinstance(word, str) for word in value):
        total = sum(len(word) for word in value)
        if total > MAX_COMMAND_CHARS:
            raise CommandError(f"The command is {total} characters long: at most {MAX_COMMAND_CHARS}.")
        words = list(value)
    else:
        raise CommandError("Give the command as a list of strings or one line of text.")
    if len(words) > MAX_COMMAND_ARGS:
        raise CommandError(f"The command has {len(words)} words: at most {MAX_COMMAND_ARGS}.")
    return words
