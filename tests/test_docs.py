"""The documentation cannot fall behind the code: every environment variable the console reads and every
management command (with each of its options) is in the Reference pages, and no page points outside the
repository. The site itself is built with `mkdocs build --strict` in .ci/run (broken links and anchors fail)."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from django.core.management import load_command_class
from django.core.management.base import BaseCommand

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
SETTINGS_PAGE = (DOCS / "reference" / "settings.md").read_text()
COMMANDS_PAGE = (DOCS / "reference" / "commands.md").read_text()
# Code that is not the product: the suite, the benchmarks, the environment.
NOT_PRODUCT = {"tests", "bench", ".venv", "site", "docs", "node_modules"}
ENV_HELPERS = {"env_bool", "env_list"}  # console/settings.py's readers of one variable


def product_sources() -> list[Path]:
    return sorted(p for p in ROOT.rglob("*.py") if not NOT_PRODUCT & set(p.relative_to(ROOT).parts))


def _is_environ(node: ast.AST) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "environ" and isinstance(node.value, ast.Name) \
        and node.value.id == "os"


def environment_variables(source: str) -> set[str]:
    """The names a module reads from the environment: os.environ.get("X"), os.environ["X"], os.getenv("X"),
    "X" in os.environ, and settings' env_bool("X", ...) / env_list("X", ...)."""
    names = set()
    for node in ast.walk(ast.parse(source)):
        first = None
        if isinstance(node, ast.Call) and node.args:
            func = node.func
            if isinstance(func, ast.Attribute) and func.attr in {"get", "setdefault"} and _is_environ(func.value):
                first = node.args[0]
            elif isinstance(func, ast.Attribute) and func.attr == "getenv":
                first = node.args[0]
            elif isinstance(func, ast.Name) and func.id in ENV_HELPERS:
                first = node.args[0]
        elif isinstance(node, ast.Subscript) and _is_environ(node.value):
            first = node.slice
        elif isinstance(node, ast.Compare) and any(_is_environ(c) for c in node.comparators):
            first = node.left
        if isinstance(first, ast.Constant) and isinstance(first.value, str):
            names.add(first.value)
    return names


def test_the_scan_finds_what_the_settings_read():
    """The scan itself: it finds each kind of read (so that the next test cannot pass by finding nothing)."""
    found = environment_variables(
        'import os\nA = os.environ.get("A")\nB = os.environ["B"]\nC = env_bool("C", True)\n'
        'D = env_list("D", [])\nE = "E" in os.environ\nF = os.getenv("F")\nos.environ.setdefault("G", "x")\n')
    assert found == {"A", "B", "C", "D", "E", "F", "G"}
    settings = environment_variables((ROOT / "console" / "settings.py").read_text())
    assert {"SECRET_KEY", "DEBUG", "ALLOWED_HOSTS", "DATABASE_URL", "OIDC_ISSUER", "LOCAL_LOGIN",
            "CONSOLE_GPU_IDLE_THRESHOLD", "SECURE_HSTS_PRELOAD"} <= settings
    assert len(settings) >= 40


def test_every_environment_variable_the_console_reads_is_in_the_reference():
    missing = {}
    for path in product_sources():
        for name in environment_variables(path.read_text()):
            if f"`{name}`" not in SETTINGS_PAGE:
                missing.setdefault(name, str(path.relative_to(ROOT)))
    assert not missing, ("read from the environment but missing from docs/reference/settings.md "
                         f"(write it there as `NAME`): {missing}")


def product_commands() -> list[tuple[str, str]]:
    """(app, command) of every management command of the console (the suite's own helpers left out)."""
    found = []
    for path in ROOT.rglob("management/commands/*.py"):
        parts = path.relative_to(ROOT).parts
        if NOT_PRODUCT & set(parts) or path.name.startswith("_"):
            continue
        found.append((".".join(parts[:-3]), path.stem))
    return sorted(found)


BASE_OPTIONS = {o for a in BaseCommand().create_parser("manage.py", "x")._actions for o in a.option_strings}


def test_the_console_has_its_commands():
    assert {name for _, name in product_commands()} >= {"cluster_add", "sync_clusters", "snapshot_usage",
                                                        "demo", "run_demo"}


@pytest.mark.parametrize(("app", "name"), product_commands())
def test_every_management_command_and_option_is_in_the_reference(app, name):
    heading = re.search(rf"^## {re.escape(name)}\n(.*?)(?=^## |\Z)", COMMANDS_PAGE, re.M | re.S)
    assert heading, f"manage.py {name} has no section `## {name}` in docs/reference/commands.md"
    section = heading.group(1)
    parser = load_command_class(app, name).create_parser("manage.py", name)
    options = {o for a in parser._actions for o in a.option_strings if o.startswith("--")} - BASE_OPTIONS
    missing = sorted(o for o in options if f"`{o}" not in section)
    assert not missing, f"manage.py {name}: options missing from its section in docs/reference/commands.md: {missing}"
    positionals = [a.dest for a in parser._actions if not a.option_strings and a.dest != "help"]
    for dest in positionals:
        assert f"`{dest.upper()}`" in section, f"manage.py {name}: its argument {dest} is not described"


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]


def test_no_page_points_outside_the_repository():
    for page in pages():
        text = page.read_text()
        assert "DOMAIN" not in text, f"{page.relative_to(ROOT)} cites a document outside the repository"
        for target in re.findall(r"\]\(([^)\s]+)", text):
            assert not re.match(r"[a-z]+:", target), f"{page.relative_to(ROOT)} links outside the repository: {target}"
            path = target.split("#")[0]
            if path:
                resolved = (page.parent / path).resolve()
                generated = resolved.relative_to(DOCS).as_posix() in {"reference/openapi.yaml",
                                                                        "reference/api-endpoints.md"} \
                    if resolved.is_relative_to(DOCS) else False
                assert resolved.is_relative_to(ROOT) and (resolved.exists() or generated), \
                    f"{page.relative_to(ROOT)} links to {target}, which is not in the repository"


OUTSIDE_CITATIONS = re.compile(r"DOMAIN(?:\.md)?\s*(?:§|sections?\b)|\bseeds?/|\bseed 00\d", re.I)


def test_no_comment_cites_a_document_outside_the_repository():
    """Code, templates and manifests point to the product's own docs (docs/concepts.md#quota, ...)."""
    cited = []
    for path in [*ROOT.rglob("*.py"), *ROOT.rglob("*.html"), *ROOT.rglob("*.yaml"), *pages()]:
        parts = set(path.relative_to(ROOT).parts)
        if {".venv", "site", "node_modules"} & parts or path == Path(__file__):
            continue
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if OUTSIDE_CITATIONS.search(line):
                cited.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()[:100]}")
    assert not cited, "cites a document outside the repository:\n" + "\n".join(cited)


def test_every_picture_the_pages_show_is_made_by_the_screenshot_script():
    script = (DOCS / "screenshots.py").read_text()
    shown = {name for page in pages() for name in re.findall(r"img/([\w-]+\.png)", page.read_text())}
    assert shown, "no page shows a picture"
    for name in shown:
        assert (DOCS / "img" / name).exists(), f"docs/img/{name} is shown but missing"
        assert f'"{name}"' in script, f"docs/img/{name} is not made by docs/screenshots.py"
    assert sum((DOCS / "img" / name).stat().st_size for name in shown) < 3 * 1024 * 1024
