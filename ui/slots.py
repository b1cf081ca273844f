"""Named places on a lower app's page where upper apps put their sections: registration, as the sync's
informers register the kinds they mirror. The lower template names the place, never the upper app:

    {% load console_ui %}{% slot "pool-detail.blueprint" pool %}

and the upper app, in its AppConfig.ready(), names the inclusion tag of its own library that fills it:

    slots.register("pool-detail.blueprint", library="provisioning", tag="pool_blueprint")

Each registered tag is rendered as if the page had written `{% load <library> %}{% <tag> object %}`
there (same context, same output); several fill one place in the order they registered, a line apart.
A place nobody registered for renders nothing.

A place inside a table's rows (a column of the upper app's) is filled once per row; what the upper app
reads once for the whole table it keeps with `memo(context, key, compute)`, once per rendering of the page.
"""
from __future__ import annotations

from typing import Any, Callable

from django.template import Context

_SLOTS: dict[str, list[tuple[str, str]]] = {}
_COMPILED: dict[tuple, Any] = {}  # (engine, the place's entries) -> its compiled template


def register(slot: str, *, library: str, tag: str) -> None:
    """Fill the place `slot` with the tag `tag` of the template tag library `library` (idempotent)."""
    entries = _SLOTS.setdefault(slot, [])
    if (library, tag) not in entries:
        entries.append((library, tag))


def render(slot: str, context: Context, obj: Any = None) -> str:
    entries = _SLOTS.get(slot)
    if not entries:
        return ""
    engine = context.template.engine
    key = (engine, tuple(entries))
    template = _COMPILED.get(key)
    if template is None:  # a place inside a table's rows is rendered once per row: compiled once
        source = "\n".join(f"{{% load {library} %}}{{% {tag} slot_object %}}" for library, tag in entries)
        template = _COMPILED[key] = engine.from_string(source)
    with context.push(slot_object=obj):
        return template.render(context)


def memo(context: Context, key: str, compute: Callable[[], Any]) -> Any:
    """`compute()` once per rendering of the page (every slot and include of it shares the value): for a
    tag filling a place that repeats per row, what it reads once for the whole table."""
    # The render context's bottom dict lives as long as the page's rendering and is shared by the
    # copies includes and inclusion tags make; the pushed dicts above it are per template.
    store = context.render_context.dicts[0].setdefault("ui.slots.memo", {})
    if key not in store:
        store[key] = compute()
    return store[key]
