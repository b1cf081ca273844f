"""What the sync writes after a full list of every registered resource, from an emulator in the same process:
the sync's own `Mirror` (index, values, mark and sweep, writers), without the HTTP round trips, for tests
that move the emulator's manual clock step by step."""
from __future__ import annotations

from django.db import transaction


def _selected(obj: dict, selector: str) -> bool:
    """A field selector of `a.b=value` terms, ANDed (what a registration's `field_selector` holds)."""
    for term in filter(None, selector.split(",")):
        path, _, value = term.partition("=")
        found = obj
        for part in path.split("."):
            found = found.get(part) if isinstance(found, dict) else None
        if found != value:
            return False
    return True


def mirror(cluster, emu) -> None:
    from kubesim.resources import find_resource
    from nodepools.sync.mirror import Mirror

    mirrored = Mirror(cluster)
    for name, resource in mirrored.resources.items():
        found = find_resource(resource.group, resource.version, resource.plural)
        seen: set = set()
        for obj in emu.list(found.key) if found is not None else []:
            if not resource.field_selector or _selected(obj, resource.field_selector):
                mirrored.apply(name, obj, seen)
        mirrored.sweep(name, seen)
    with transaction.atomic():
        mirrored.flush()
