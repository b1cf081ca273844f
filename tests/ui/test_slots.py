"""Places on a lower app's page that upper apps fill (ui/slots.py), and the rule they serve: the templates
of an app load only the tag libraries, and include only the templates, of itself and the apps below it."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.template import Context, Library, engines

from ui import slots

ROOT = Path(__file__).resolve().parents[2]

# The floors of the apps, lowest first, as their imports stand (../shared/tools/import_circles.py keeps
# them free of circles); apps on one floor are siblings and name each other no more than an upper app.
FLOOR = {"access": 0, "common": 0, "kube": 0, "gpumetrics": 0, "ui": 1, "audit": 2, "accounts": 3,
         "nodepools": 3, "projects": 4, "provisioning": 4, "enforcers": 5, "usage": 6, "ledger": 7, "workloads": 8}
# templates/<folder>/ of an app whose folder is not its name.
FOLDER_APP = {"account": "accounts", "registration": "accounts", "live": "nodepools"}


def _render(source: str, **values) -> str:
    return engines["django"].from_string(source).render(values)


@pytest.fixture
def slot_registry(monkeypatch):
    monkeypatch.setattr(slots, "_SLOTS", {})
    return slots


def test_a_place_nobody_filled_renders_nothing(slot_registry):
    assert _render('{% load console_ui %}[{% slot "nobody.here" 3 %}]') == "[]"


def test_the_tags_registered_for_a_place_render_in_order_a_line_apart(slot_registry):
    library = Library()

    @library.simple_tag
    def first(obj):
        return f"first {obj}"

    @library.simple_tag
    def second(obj):
        return f"second {obj}"

    engine = engines["django"].engine
    engine.template_libraries["slot_test_lib"] = library
    try:
        slot_registry.register("test.place", library="slot_test_lib", tag="first")
        slot_registry.register("test.place", library="slot_test_lib", tag="second")
        slot_registry.register("test.place", library="slot_test_lib", tag="first")  # once is enough
        assert _render('{% load console_ui %}{% slot "test.place" 7 %}') == "first 7\nsecond 7"
    finally:
        del engine.template_libraries["slot_test_lib"]


def test_memo_computes_once_per_rendering_of_a_page_across_includes_and_slots():
    calls = []

    def compute():
        calls.append(1)
        return len(calls)

    context = Context({})
    engine = engines["django"].engine
    template = engine.from_string("{% for i in items %}{% include inner %}{% endfor %}")
    inner = engine.from_string("x")

    seen = []
    original = inner.render

    def render(ctx):
        seen.append(slots.memo(ctx, "test.key", compute))
        return original(ctx)

    inner.render = render
    context.update({"items": [1, 2, 3], "inner": inner})
    template.render(context)
    assert seen == [1, 1, 1] and len(calls) == 1
    # Another rendering (another page) reads again.
    seen.clear()
    template.render(Context({"items": [1], "inner": inner}))
    assert seen == [2]


def _app_of_library() -> dict[str, str]:
    return {path.stem: path.parts[-3] for path in ROOT.glob("*/templatetags/*.py") if path.stem != "__init__"}


def test_an_apps_templates_name_only_its_own_and_lower_apps_libraries_and_templates():
    owners = _app_of_library()
    wrong = []
    for path in sorted((ROOT / "templates").glob("*/**/*.html")):
        folder = path.relative_to(ROOT / "templates").parts[0]
        app = FOLDER_APP.get(folder, folder)
        if app not in FLOOR:
            continue
        text = path.read_text()

        def allowed(other: str) -> bool:
            return other == app or other not in FLOOR or FLOOR[other] < FLOOR[app]

        for load in re.findall(r"{%\s*load\s+([^%]*?)\s*%}", text):
            for library in load.split():
                owner = owners.get(library)
                if owner and not allowed(owner):
                    wrong.append(f"{path.relative_to(ROOT)} loads {library} ({owner})")
        for name in re.findall(r"""{%\s*include\s+["']([^"'/]+)/""", text):
            other = FOLDER_APP.get(name, name)
            if not allowed(other):
                wrong.append(f"{path.relative_to(ROOT)} includes a template of {other}")
    assert wrong == []
