"""The Containerfile, read statically (no container engine here): a builder stage with compilers
builds the wheels; the final slim stage has no compiler, collects the static files at build and runs
as the non-root user the manifests expect (10001)."""
from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent
COMPILERS = ("build-essential", "gcc", "g++", "clang", "make", "libpq-dev", "python3-dev", "cargo", "rustc")


def stages() -> list[tuple[str, str, list[str]]]:
    """(base image, stage name, instructions) per stage, with continuation lines joined."""
    text = re.sub(r"\\\n", " ", (REPO / "Containerfile").read_text())
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]
    result = []
    for line in lines:
        match = re.match(r"FROM\s+(\S+)(?:\s+AS\s+(\S+))?", line, re.IGNORECASE)
        if match:
            result.append((match.group(1), match.group(2) or "", []))
        else:
            result[-1][2].append(line)
    return result


def test_two_stages_builder_then_final_slim():
    built = stages()
    assert [name for _, name, _ in built] == ["builder", "final"]
    assert all("slim" in image for image, _, _ in built)
    builder = " ".join(built[0][2])
    assert "build-essential" in builder and "pip wheel" in builder


def test_final_stage_has_no_compilers_and_installs_only_built_wheels():
    final = stages()[-1][2]
    text = " ".join(final)
    for compiler in COMPILERS:
        assert not re.search(rf"(?<![\w-]){re.escape(compiler)}(?![\w-])", text), f"{compiler} in the final stage"
    assert "apt-get install" not in text
    assert "COPY --from=builder /wheels /wheels" in final
    assert "--no-index --find-links /wheels" in text


def test_final_stage_collects_static_files_and_runs_as_non_root():
    final = stages()[-1][2]
    assert any("manage.py collectstatic --noinput" in line for line in final)
    users = [line.split(None, 1)[1] for line in final if line.upper().startswith("USER ")]
    assert users == ["10001:10001"]
    assert final[-1].startswith("CMD") and "daphne" in final[-1]


def test_build_context_leaves_out_the_virtualenv_and_local_databases():
    ignored = (REPO / ".containerignore").read_text().split()
    assert {".venv", ".git", "db.sqlite3*", "staticfiles"} <= set(ignored)
