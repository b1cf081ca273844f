"""The apps' floors (docs/development/index.md, Floors): a lower app's code and templates never name an app above it.

An app above reaches down by importing; a lower app learns of the apps above only through registration
(signals, registries, slots, relations declared from above with `add_to_class`). This reads the source as
text (ast for Python, the `{% load %}` tags of templates), so that a late import, a string reference to a
model (`"projects.Project"`) or a template tag library of an app above is caught the day it is written.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from django.apps import apps

ROOT = Path(__file__).resolve().parent.parent

# Lowest first; an app may name its own floor's and the lower floors' apps.
FLOORS = [
    {"access"},
    {"ui"},
    {"audit"},
    {"nodepools"},
    {"projects"},
    {"enforcers", "usage", "accounts", "provisioning"},
    {"ledger", "workloads"},
]
LEVEL = {app: level for level, floor in enumerate(FLOORS) for app in floor}
MODEL_REFERENCE = re.compile(r"^([a-z_]+)\.([A-Z][A-Za-z]+)$")


def _above(app: str) -> set[str]:
    return {other for other, level in LEVEL.items() if level > LEVEL[app]}


def _tag_libraries(app: str) -> set[str]:
    return {p.stem for p in (ROOT / app / "templatetags").glob("*.py") if p.stem != "__init__"}


def _python_files(app: str):
    for path in sorted((ROOT / app).rglob("*.py")):
        if "migrations" not in path.parts:  # a migration records history, as it was written
            yield path


def _names_of_apps_above(app: str) -> list[str]:
    above = _above(app)
    found = []
    for path in _python_files(app):
        tree = ast.parse(path.read_text(), filename=str(path))
        rel = path.relative_to(ROOT)
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                found += [f"{rel}:{node.lineno} imports {a.name}" for a in node.names if a.name.split(".")[0] in above]
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                if node.module.split(".")[0] in above:
                    found.append(f"{rel}:{node.lineno} imports from {node.module}")
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                match = MODEL_REFERENCE.match(node.value)
                if match and match.group(1) in above:
                    found.append(f"{rel}:{node.lineno} names the model {node.value}")
    libraries_above = {lib: other for other in above for lib in _tag_libraries(other)}
    for path in sorted((ROOT / app / "templates").rglob("*.html")) if (ROOT / app / "templates").exists() else ():
        for number, line in enumerate(path.read_text().splitlines(), 1):
            for load in re.findall(r"{%\s*load\s+([^%]+?)\s*%}", line):
                for library in load.split():
                    if library in libraries_above:
                        found.append(f"{path.relative_to(ROOT)}:{number} loads {library} of {libraries_above[library]}")
    return found


def test_every_floor_is_an_installed_app():
    installed = {config.name for config in apps.get_app_configs()}
    assert set(LEVEL) <= installed


@pytest.mark.parametrize("app", sorted(LEVEL, key=lambda app: (LEVEL[app], app)))
def test_a_lower_app_names_no_app_above_it(app):
    assert _names_of_apps_above(app) == []


def test_the_relations_declared_from_above_are_in_place():
    # Declared by the apps above on the lower floors' models, with the behaviour the pages rely on.
    pod, assignment = apps.get_model("nodepools", "Pod"), apps.get_model("access", "RoleAssignment")
    project, department, cluster = (apps.get_model("projects", "Project"), apps.get_model("projects", "Department"),
                                    apps.get_model("nodepools", "Cluster"))
    assert pod._meta.get_field("project").related_model is project
    assert pod._meta.get_field("project").remote_field.on_delete.__name__ == "SET_NULL"
    assert project._meta.get_field("pods").related_model is pod
    for name, model in {"cluster": cluster, "department": department, "project": project}.items():
        field = assignment._meta.get_field(name)
        assert field.related_model is model and field.remote_field.on_delete.__name__ == "CASCADE"
