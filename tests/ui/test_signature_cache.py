"""The cache of render methods' parameters (ui.tables.cached_signature) answers as django-tables2 does."""
from __future__ import annotations

import django_tables2.utils

from ui import tables


class Table:
    def render_a(self, value, record):
        return value

    def render_b(self, **kwargs):
        return kwargs


def plain(value, *args, bound_column=None, **rest):
    return value


def test_cached_signature_answers_as_django_tables2_does_and_remembers_it():
    table = Table()
    for fn in (table.render_a, table.render_b, plain, Table.render_a, lambda record: record):
        assert tables.cached_signature(fn) == tables._uncached_signature(fn)
        assert tables.cached_signature(fn) is tables.cached_signature(fn)
    # A bound method and its function have different parameters (self), each remembered apart.
    assert tables.cached_signature(table.render_a) == (("value", "record"), None)
    assert tables.cached_signature(Table.render_a) == (("self", "value", "record"), None)
    assert django_tables2.utils.signature is tables.cached_signature  # what django-tables2 calls per cell
