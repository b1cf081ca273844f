"""MkDocs hook: the REST API's OpenAPI schema, generated from the code at every build.

`manage.py spectacular` (drf-spectacular) writes the schema the running console serves at /api/schema/;
the build adds it to the site as reference/openapi.yaml (linked from the REST API page) and a page listing
every endpoint with its methods and summary (reference/api-endpoints.md). Neither is kept in git: the
reference cannot fall behind the code.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import yaml
from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parent.parent
METHODS = ("get", "post", "put", "patch", "delete")
_cache: dict[str, str] = {}


def _schema() -> str:
    if "yaml" not in _cache:
        env = {**os.environ, "DJANGO_SETTINGS_MODULE": "console.settings"}
        proc = subprocess.run([sys.executable, "manage.py", "spectacular", "--format", "openapi",
                               "--validate", "--fail-on-warn"],
                              cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
        if proc.returncode != 0:
            raise RuntimeError(f"manage.py spectacular failed:\n{proc.stderr}")
        _cache["yaml"] = proc.stdout
    return _cache["yaml"]


def _first_sentences(text: str, at_least: int = 60) -> str:
    """The description's first sentences, enough for a line of the table."""
    out = ""
    for sentence in re.split(r"(?<=\.)\s+(?=[A-Z`])", " ".join(text.split())):
        out = f"{out} {sentence}".strip()
        if len(out) >= at_least:
            break
    return out


def _endpoints_page(text: str) -> str:
    schema = yaml.safe_load(text)
    lines = [
        "# API endpoints",
        "",
        f"Every endpoint of the REST API ({schema['info']['title']}, version {schema['info']['version']}), "
        "generated from the code at each build of these pages. The whole schema, with every field, is "
        "[openapi.yaml](openapi.yaml); a running console serves it at `/api/schema/` and as Swagger UI at "
        "`/api/docs/`. How to authenticate, errors and concurrency: [REST API](api.md).",
        "",
    ]
    sections: dict[str, list[str]] = {}
    for path, item in schema["paths"].items():
        tag = path.removeprefix("/api/v1/").split("/")[0] or "api"
        for method in METHODS:
            if method in item:
                op = item[method]
                summary = _first_sentences(op.get("summary") or op.get("description") or "")
                sections.setdefault(tag, []).append(
                    f"| `{method.upper()}` | `{path}` | {summary.replace('|', '/')} |")
    for tag in sorted(sections):
        lines += [f"## {tag}", "", "| method | path | what |", "|---|---|---|", *sections[tag], ""]
    return "\n".join(lines)


def on_files(files, config):
    text = _schema()
    files.append(File.generated(config, "reference/openapi.yaml", content=text))
    files.append(File.generated(config, "reference/api-endpoints.md", content=_endpoints_page(text)))
    return files
