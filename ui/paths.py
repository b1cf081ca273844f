"""`reverse()` of a page addressed by one number (a node's, a pool's, a workload's id), made once per URL name.

A table links every row to its page: 50 rows × 2-3 links, each a full `django.urls.reverse()` (the resolver's
candidates, the converters, the quoting) at some 20 µs. The address of `node-detail` for id 42 is the one for
any id with 42 in its place, so the address is reversed once per name (with a marker id), and each row's is
the text around the marker with its id between:

    path_to("node-detail", 42)    # == reverse("node-detail", args=[42])
    path_to("workload-list")       # == reverse("workload-list"), kept whole

Only a whole number ≥ 0 takes the shortcut (what an `<int:...>` converter writes as `str(n)`); anything else,
and a name whose address does not hold the marker once, goes through `reverse()` itself. Kept per script
prefix and URL configuration, as `reverse()` reads them per request.
"""
from __future__ import annotations

from django.urls import get_script_prefix, get_urlconf, reverse

from common import caches

_MARK = 9876543210123
_NONE = object()
# (view name, script prefix, URL configuration) -> its address without an id, and the text around the id's.
_PLAIN: dict[tuple, str] = caches.register({})
_TEMPLATES: dict[tuple, tuple[str, str] | None] = caches.register({})


def path_to(viewname: str, pk=_NONE) -> str:
    """`reverse(viewname, args=[pk])`; `reverse(viewname)` without `pk`."""
    if pk is not _NONE and (pk.__class__ is not int or pk < 0):
        return reverse(viewname, args=[pk])
    key = (viewname, get_script_prefix(), get_urlconf())
    if pk is _NONE:
        found = _PLAIN.get(key)
        if found is None:
            found = _PLAIN[key] = reverse(viewname)
        return found
    try:
        template = _TEMPLATES[key]
    except KeyError:
        marked = reverse(viewname, args=[_MARK])
        before, found, after = marked.partition(str(_MARK))
        template = _TEMPLATES[key] = (before, after) if found and str(_MARK) not in after else None
    if template is None:
        return reverse(viewname, args=[pk])
    return f"{template[0]}{pk}{template[1]}"
