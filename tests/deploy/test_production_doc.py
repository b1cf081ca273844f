"""docs/administration/production.md: every test it names as exercising a step exists, and its commands
use the objects and paths the manifests define."""
from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent
DOC = (REPO / "docs" / "administration" / "production.md").read_text()


def test_every_test_the_doc_names_exists():
    references = re.findall(r"(tests/[\w/]+\.py)(?:::(\w+))?", DOC)
    assert len(references) >= 15
    for path, name in references:
        source = REPO / path
        assert source.exists(), f"the production page names {path}, which does not exist"
        if name:
            functions = {node.name for node in ast.walk(ast.parse(source.read_text()))
                         if isinstance(node, ast.FunctionDef)}
            assert name in functions, f"the production page names {path}::{name}, which does not exist"


def test_every_step_has_its_test_in_a_comment():
    blocks = re.findall(r"```sh\n(.*?)```", DOC, re.S)
    assert blocks
    for block in blocks:
        commands = [line for line in block.splitlines() if line.startswith(("kubectl", "podman", "python3"))]
        assert commands and "tests/" in block, f"a step without its test: {block}"


def test_doc_commands_name_the_manifests_objects():
    manifests = "\n".join(p.read_text() for p in (REPO / "deploy").rglob("*.yaml"))
    for name in set(re.findall(r"(?:deployment|job|secret generic)/?\s?(gpu-console-[a-z-]+)", DOC)):
        assert name in manifests, f"the production page uses {name}, which deploy/ does not define or mount"
    assert "kubectl apply -k deploy/overlays/" in DOC
    assert "/etc/console/kubeconfigs" in manifests and "/etc/console/kubeconfigs/prod-east" in DOC


def install_steps() -> str:
    """The section "Install, step by step" of the production page: the commands tests/deploy/test_install.py runs."""
    section = DOC[DOC.index("\n## Install, step by step\n") + 1:]
    return section[:section.find("\n## ", 5)]


def test_every_test_the_install_steps_name_exists():
    section = install_steps()
    references = re.findall(r"(tests/[\w/]+\.py)(?:::(\w+))?", section)
    assert len(references) >= 10
    for path, name in references:
        source = REPO / path
        assert source.exists(), f"the install steps name {path}, which does not exist"
        if name:
            functions = {node.name for node in ast.walk(ast.parse(source.read_text()))
                         if isinstance(node, ast.FunctionDef)}
            assert name in functions, f"the install steps name {path}::{name}, which does not exist"


def test_every_install_step_has_its_test():
    """Install, SSO, clusters (kubeconfig and in-cluster), scaling, /metrics: each command block names the
    test that runs it, and the install-in-cluster steps are all there. No link leaves the repository."""
    section = install_steps()
    blocks = re.findall(r"```sh\n(.*?)```", section, re.S)
    for block in blocks:
        assert re.search(r"^# tests/\S+\.py::\w+", block, re.M), f"a step without its test: {block}"
    commands = "\n".join(blocks)
    for step in ("kubectl apply -k deploy/overlays/", "create secret generic gpu-console-oidc",
                 "cluster_add prod-east --kubeconfig", "cluster_add local --in-cluster",
                 "scale deployment/gpu-console-web", "/metrics"):
        assert step in commands, f"the install steps lack {step!r}"
    for url in re.findall(r"https?://([^\s`)/:]+)", section):
        assert url == "<host>" or url.endswith("example.com"), f"the install steps link outside the repository: {url}"
    assert "](http" not in section
