"""The machinery every table of the console shares (django-tables2).

A table class declares all its columns, a `key` (its name in the user's preferences) and
`default_columns`. `table_build()` applies the user's column choice, the sort and the pagination;
`csv_response()` streams the same view (or all columns) as CSV.
"""
from __future__ import annotations

import csv
import io
import re
import types
import weakref
from datetime import date, datetime, timezone
from decimal import Decimal
from itertools import islice, repeat
from operator import itemgetter
from typing import Any, AsyncIterator, Callable, Iterable, Iterator, Sequence

import django_tables2 as tables
import django_tables2.utils
from django_tables2.data import TableListData, TableQuerysetData
from asgiref.sync import sync_to_async
from django.db import models
from django.db.models import QuerySet
from django.db.models.sql.constants import MULTI
from django.http import StreamingHttpResponse
from django.utils.html import conditional_escape
from django.utils.safestring import mark_safe
from django.utils import timezone as django_timezone
from django_tables2 import RequestConfig
from django_tables2.utils import Accessor

from common import caches
from common.csv import FORMULA_STARTS, escape_cell
from ui.html import esc, link
from ui.selectors import table_columns

PER_PAGE = 50
PER_PAGE_CHOICES = (25, 50, 100, 500)


# django-tables2 works out a render method's parameters (inspect.signature) for every cell it renders:
# at 50 rows x 15 columns that was the largest part of a table page's time. A function's parameters do
# not change, so they are worked out once per function (weakly held: a lambda made per table goes away).
_SIGNATURES: "weakref.WeakKeyDictionary[Callable, dict[bool, Any]]" = caches.register(weakref.WeakKeyDictionary())
_uncached_signature = django_tables2.utils.signature


def cached_signature(fn):
    """django_tables2.utils.signature(fn), remembered per function (a bound method by its function)."""
    if isinstance(fn, types.MethodType) and isinstance(fn.__func__, types.FunctionType):
        key, bound = fn.__func__, True
    elif isinstance(fn, types.FunctionType):
        key, bound = fn, False
    else:
        return _uncached_signature(fn)
    slots = _SIGNATURES.setdefault(key, {})
    if bound not in slots:
        slots[bound] = _uncached_signature(fn)
    return slots[bound]


django_tables2.utils.signature = cached_signature


def per_page_from(query, *, prefix: str = "", default: int = PER_PAGE) -> tuple[int | None, str]:
    """The page size asked for in `?<prefix>per_page=` if it is one of PER_PAGE_CHOICES, and the
    message saying why not when it is not (the table then shows the default page size)."""
    name = f"{prefix}per_page"
    raw = query.get(name)
    if raw is None or raw == "":
        return None, ""
    allowed = ", ".join(str(n) for n in PER_PAGE_CHOICES)
    try:
        value = int(raw.strip())
    except ValueError:
        value = None
    if value in PER_PAGE_CHOICES:
        return value, ""
    shown = raw if len(raw) <= 20 else raw[:20] + "…"
    return None, (f"{name}: “{shown}” is not an allowed page size; choose one of {allowed}. "
                  f"Showing {default} rows per page.")


def _tie_key(record, field: str):
    value = record.get(field) if isinstance(record, dict) else getattr(record, field, None)
    return (value is None, str(value).lower() if isinstance(value, str) else value) if value is not None else (True, 0)


class ConsoleTable(tables.Table):
    key: str = ""
    default_columns: Sequence[str] = ()
    # Optional: fills computed attributes of a list of records in place (a grouped query per page,
    # instead of a subquery per row).
    enrich: Callable[[list], Any] | None = None
    # Optional, for large exports: the CSV reads plain rows (no model instances) from
    # `export_values(queryset)`, `queryset.values(*export_fields)` unless a table adds the computed
    # values it needs to the same query; its export getters read a row as a dict.
    export_fields: Sequence[str] | None = None
    # Optional: a column the CSV writes as several, `{name: ((part, header), ...)}`, each part read by
    # `export_<part>(record)` (e.g. "Ready/total GPU devices" as two numbers, not a date-like "4/4").
    csv_parts: dict[str, Sequence[tuple[str, str]]] = {}
    # Optional, for large exports of `export_fields` rows: `{column or part: (field, ...)}`, a cell whose text
    # depends only on those fields of the row, its getter reading no other (it is given just those); the export
    # writes each distinct value's text once and reuses it (a fleet's nodes share a few CPU, memory and GPU
    # sizes: rounding and formatting them per row was most of the CSV's time). The text is the same as the
    # getter's, through `csv_cell`.
    export_depends: dict[str, Sequence[str]] = {}
    # How rows that sort equal are ordered: by these fields after the chosen sort (None: the model's `name` when
    # it has one, else its own ordering; then the primary key, so that a page never reshuffles equal rows).
    tie_order: Sequence[str] | None = None

    @property
    def order_by(self):
        return self._order_by

    @order_by.setter
    def order_by(self, value):
        """django-tables2's sort, then ties by name (`tie_order`): once for every table of the console."""
        data = self.data
        ties = self.tie_fields()
        if isinstance(data, TableListData) and ties and value:
            # Python's sort is stable: sorted by the ties first, the chosen sort keeps their order among equals.
            data.data.sort(key=lambda record: tuple(_tie_key(record, field) for field in ties))
        tables.Table.order_by.fset(self, value)
        if isinstance(data, TableQuerysetData) and ties and self._order_by:
            queryset = data.data
            current = list(queryset.query.order_by)
            named = {str(o).lstrip("-") for o in current if isinstance(o, str)}
            extra = [field for field in ties if field.lstrip("-") not in named]
            if extra:
                data.data = queryset.order_by(*current, *extra)

    def tie_fields(self) -> Sequence[str]:
        if self.tie_order is not None:
            return self.tie_order
        model = getattr(getattr(self.data, "data", None), "model", None)
        if model is None:
            records = getattr(self.data, "data", None) or []
            first = records[0] if isinstance(records, list) and records else None
            has_name = first is not None and (hasattr(first, "name") or (isinstance(first, dict) and "name" in first))
            return ("name",) if has_name else ()
        names = {f.name for f in model._meta.get_fields()}
        if "name" in names:
            return ("name", "pk")
        # No name (events, snapshots, ledger lines): the model's own order (newest first, say), then the key.
        own = [o for o in model._meta.ordering if isinstance(o, str) and o.lstrip("-") not in ("pk", "id")]
        return (*own, "pk")

    def export_values(self, queryset: QuerySet) -> QuerySet:
        """The rows of the export (`values()`), in one query."""
        return queryset.values(*self.export_fields)

    def body_html(self):
        """The <tr> rows of the current page as one string: the same cells django-tables2 renders, without a
        template round-trip per cell, each column's way to its cells worked out once (`_Cells`)."""
        columns = list(self.columns)
        tds = [f"<td {c.attrs['td'].as_html()}>" if c.attrs.get("td") else "<td>" for c in columns]
        cells = [_Cells(self, column) for column in columns]
        row_attrs = _row_attrs(self)
        parts = []
        for row in self.paginated_rows:
            parts.append(f"<tr {row_attrs(row) if row_attrs is not None else row.attrs.as_html()}>")
            record = row.record
            for td, cell in zip(tds, cells):
                parts.append(td)
                parts.append(esc(cell.html(row, record)))
                parts.append("</td>")
            parts.append("</tr>\n")
        if not parts and self.empty_text:
            parts.append(f'<tr><td colspan="{len(columns)}">{conditional_escape(self.empty_text)}</td></tr>')
        return mark_safe("".join(parts))

    @property
    def paginated_rows(self):
        rows = super().paginated_rows
        enrich = self.enricher()
        if enrich is not None and not getattr(self, "_rows_enriched", False):
            enrich([row.record for row in rows])
            self._rows_enriched = True
        return rows

    def enricher(self) -> Callable[[list], Any] | None:
        """What fills the computed attributes of a page's (or a CSV batch's) records: the instance's
        `enrich_records` (which may read what the table was built with, e.g. the user), else `enrich`."""
        return getattr(self, "enrich_records", None) or type(self).enrich

    class Meta:
        template_name = "ui/table.html"
        attrs = {"class": "data"}
        empty_text = "Nothing to show: no rows match, or none you may see."

    @classmethod
    def add_column(cls, name: str, column: tables.Column, *, after: str, default_after: str | None = None) -> None:
        """A column declared by an app above the table's own, from its AppConfig.ready() (the table's app never
        names it): placed after `after` in the declared order, and after `default_after` in the default columns
        when given. Adding it again replaces it."""
        names = [n for n in cls.base_columns if n != name]
        names.insert(names.index(after) + 1, name)
        columns = {**cls.base_columns, name: column}
        cls.base_columns = {n: columns[n] for n in names}
        if default_after is not None:
            default = [n for n in cls.default_columns if n != name]
            default.insert(default.index(default_after) + 1, name)
            cls.default_columns = tuple(default)

    @classmethod
    def column_names(cls) -> list[str]:
        return list(cls.base_columns)

    @classmethod
    def column_label(cls, name: str) -> str:
        column = cls.base_columns[name]
        return str(column.verbose_name) if column.verbose_name else name.replace("_", " ").capitalize()

    @classmethod
    def chosen_columns(cls, user: Any) -> list[str]:
        return table_columns(user=user, table=cls.key, allowed=cls.column_names(),
                             default=cls.default_columns or cls.column_names())

    @classmethod
    def column_choices(cls, user: Any) -> list[dict[str, Any]]:
        """Every column, the chosen ones first in their order, for the column chooser."""
        chosen = cls.chosen_columns(user)
        rest = [name for name in cls.column_names() if name not in chosen]
        return [{"name": name, "label": cls.column_label(name), "shown": name in chosen} for name in chosen + rest]


_NOT_ATTRIBUTES = frozenset(django_tables2.utils.AttributeDict.blacklist)


def _row_attrs(table: "ConsoleTable") -> Callable[[Any], str] | None:
    """What `row.attrs.as_html()` writes for each row (the table's `row_attrs`, each callable called with the
    arguments it names, then "even"/"odd" added to the class), the attributes read once per page; None for
    nested attributes (a dict of them), which django-tables2 computes itself."""
    items = list(table.row_attrs.items())
    if any(isinstance(value, dict) for _, value in items):
        return None
    call = django_tables2.utils.call_with_appropriate

    def html(row) -> str:
        given = {"table": table, "record": row.record}
        attrs = {key: call(value, given) if callable(value) else value for key, value in items}
        if any(isinstance(value, dict) for value in attrs.values()):
            return row.attrs.as_html()
        even_odd = "odd" if row.row_counter % 2 else "even"
        attrs["class"] = f"{attrs['class']} {even_odd}" if attrs.get("class") else even_odd
        out = []
        for key, value in attrs.items():
            if callable(value):
                value = value()
            if key not in _NOT_ATTRIBUTES and value is not None:
                out.append(f'{esc(key)}="{esc(value)}"')
        return " ".join(out)

    return html


class _Slow(Exception):
    """A cell the quick way cannot make as django-tables2 would: made by django-tables2 itself."""


_OWN_RENDER = tables.Column.render  # the value as is
_CELL_ARGUMENTS = frozenset({"value", "record", "column", "bound_column", "bound_row", "table"})


class _Cells:
    """How the cells of one column of a page are made: what django-tables2's BoundRow._get_and_render_with and
    _call_render do for every cell (the accessor read, a choice's display, the empty values, the render method
    called with the arguments it names, the link), the parts that do not change from row to row worked out
    once. The text is the same: a record that is not a model instance, a column of links or of many-to-many
    values, a value read through a choice or a lookup the quick way does not take go to django-tables2 itself."""

    __slots__ = ("bound", "table", "accessor", "bits", "args", "kwargs", "render", "wants", "own", "link", "url",
                 "default", "empty", "choices", "quick")

    def __init__(self, table: "ConsoleTable", bound):
        from django_tables2.columns.linkcolumn import BaseLinkColumn
        from django_tables2.columns.manytomanycolumn import ManyToManyColumn

        column = bound.column
        self.bound, self.table = bound, table
        self.accessor = Accessor(bound.accessor)
        self.bits = self.accessor.bits
        self.args, self.kwargs = self.accessor.callable_args, self.accessor.callable_kwargs
        self.render = bound.render
        self.own = getattr(self.render, "__func__", None) is _OWN_RENDER
        names, catch_all = cached_signature(self.render)
        # None: every argument (a **kwargs); else the names it takes, or False when it names one no cell has
        # (django-tables2 then renders None).
        self.wants = None if catch_all else (tuple(names) if _CELL_ARGUMENTS.issuperset(names) else False)
        self.link = bound.link
        transform = self.link
        # A link of `linkify=<callable>` without attributes of its own: <a href="{url}">{content}</a>.
        self.url = (transform.url if transform is not None and callable(getattr(transform, "url", None))
                    and not transform.attrs else None)
        self.default = bound.default
        self.empty = column.empty_values
        self.choices: dict[type, bool] = {}  # record's class -> the accessor ends at a field with choices
        self.quick = bool(self.bits) and not isinstance(column, (BaseLinkColumn, ManyToManyColumn))

    def _value(self, record):
        """The accessor's value, as Accessor.resolve reads a model instance (attributes, callables called)."""
        current = record
        for bit in self.bits:
            if hasattr(current.__class__, "__getitem__"):  # tried as a key first by the accessor
                raise _Slow
            current = getattr(current, bit)
            if callable(current):
                if getattr(current, "alters_data", False):
                    raise _Slow
                if not getattr(current, "do_not_call_in_templates", False):
                    current = current(*self.args, **self.kwargs)
            if current is None:
                break
        return current

    def html(self, row, record):
        """The cell's content (before escaping), as `row.get_cell(name)` gives it."""
        if self.quick and isinstance(record, models.Model):
            cls = record.__class__
            choices = self.choices.get(cls)
            if choices is None:
                choices = self.choices[cls] = bool(getattr(self.accessor.get_field(record), "choices", ()))
            if not choices:
                try:
                    value = self._value(record)
                except Exception:
                    value = _Slow
                if value is not _Slow:
                    return self._rendered(row, record, value)
        return row._get_and_render_with(self.bound, render_func=row._call_render, default=self.default)

    def _rendered(self, row, record, value):
        if value in self.empty:
            return self.default
        wants = self.wants
        if self.own and self.link is None:
            return value
        given = {"value": value, "record": record, "column": self.bound.column, "bound_column": self.bound,
                 "bound_row": row, "table": self.table}
        if self.own:
            content = value
        elif wants is None:
            content = self.render(**given)
        elif wants is False:
            content = None
        else:
            content = self.render(**{name: given[name] for name in wants})
        if self.link is None:
            return content
        if self.url is not None:
            href = django_tables2.utils.call_with_appropriate(self.url, given)
            return content if href is None else link(href, content)
        return self.link(content, **given)


def table_build(request, table_class: type[ConsoleTable], data, *, columns: Sequence[str] | None = None,
                paginate: bool = True, per_page: int = PER_PAGE, prefix: str = "", default_order: str | None = None,
                **kwargs: Any) -> ConsoleTable:
    """A table of `data` showing the user's columns, sorted by `?sort=` and paginated by `?page=`."""
    names = list(columns) if columns is not None else table_class.chosen_columns(request.user)
    exclude = [name for name in table_class.column_names() if name not in names]
    kwargs.setdefault("attrs", {"class": "data", "id": f"{table_class.key}-table"})
    # Every console table renders through ui/table.html, also one whose Meta does not inherit ConsoleTable's.
    kwargs.setdefault("template_name", "ui/table.html")
    table = table_class(data, sequence=names + ["..."], exclude=exclude, request=None, prefix=prefix,
                        order_by=default_order, **kwargs)
    if not table.empty_text:
        table.empty_text = ConsoleTable._meta.empty_text
    chosen, error = per_page_from(request.GET, prefix=prefix, default=per_page) if paginate else (None, "")
    table.per_page_choices = PER_PAGE_CHOICES
    table.per_page_chosen = chosen
    table.per_page_shown = chosen or per_page
    table.per_page_error = error
    # tables2 would read ?per_page= itself, unchecked: it gets the validated value instead.
    table.per_page_field = "per_page_checked"
    RequestConfig(request, paginate={"per_page": table.per_page_shown} if paginate else False).configure(table)
    return table


# ---------------------------------------------------------------------------------------------------
# CSV

def csv_cell(value: Any) -> str:
    """The text of a cell; a text starting like a spreadsheet formula gets a leading `'` (the rule and
    its characters are common.csv's). The common types come first: an export writes many cells."""
    cls = value.__class__
    if cls is str:
        text = value
    elif cls is int:
        if value >= 0:
            return str(value)
        text = str(value)
    elif value is None:
        return ""
    elif cls is float:
        text = f"{value:.3f}".rstrip("0").rstrip(".")
    else:
        text = csv_text(value)
    return escape_cell(text) if text.startswith(FORMULA_STARTS) else text


def csv_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, Decimal):
        if not value:
            return "0"
        value = value.normalize()
        return f"{value:f}"
    if isinstance(value, float):
        return f"{value:.3f}".rstrip("0").rstrip(".")
    if isinstance(value, datetime):
        return value.isoformat(timespec="seconds")
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, (list, tuple)):
        return "; ".join(csv_text(v) for v in value)
    return str(value)


def _getter(table: ConsoleTable, name: str) -> Callable[[Any], Any]:
    """How one column's export value is read from a record: `export_<name>(record)` or the accessor
    (a key of the dict when the table exports `values()`)."""
    method = getattr(table, f"export_{name}", None)
    if method is not None:
        return method
    field = _export_field(table, name)
    if field is not None:
        return itemgetter(field)
    accessor = table.base_columns[name].accessor or Accessor(name)
    if "." not in accessor and "__" not in accessor:
        return lambda record: getattr(record, accessor, None)
    return lambda record: accessor.resolve(record, quiet=True)


def _export_field(table: ConsoleTable, name: str) -> str | None:
    """The `values()` field a column of an `export_fields` table is read from as is (no export method)."""
    if table.export_fields is None or hasattr(table, f"export_{name}") or name not in table.base_columns:
        return None
    return str(table.base_columns[name].accessor or Accessor(name)).replace(".", "__")


MEMO_MOST = 4096  # distinct values remembered per column: memory stays flat whatever the rows


class CellMemo(dict):
    """The text of a cell by its key (the values of the fields it depends on), `text(key)` computed on first
    use and remembered, at most MEMO_MOST keys. `cells(keys)` reads them in a C loop: a remembered cell costs
    no Python call. A key's values come from one database column each (one type, or None): equal keys have
    the same text."""

    __slots__ = ("text",)

    def __init__(self, text: Callable[[Any], str]):
        super().__init__()
        self.text = text

    def __missing__(self, key):
        text = self.text(key)
        if len(self) < MEMO_MOST:
            self[key] = text
        return text

    def cells(self, keys: Sequence[Any]) -> list[str]:
        try:
            return list(map(self.__getitem__, keys))
        except TypeError:  # an unhashable value (a list, say): computed every time
            return [self.text(key) for key in keys]


def _depends_text(get: Callable[[Any], Any], fields: Sequence[str], cell: Callable[[Any], str]
                  ) -> Callable[[Any], str]:
    """The text of a cell from its key: `get` reads a dict of just the fields the cell depends on."""
    if len(fields) == 1:
        field = fields[0]
        return lambda key: cell(get({field: key}))
    return lambda key: cell(get(dict(zip(fields, key))))


def csv_columns(request, table_class: type[ConsoleTable]) -> list[str]:
    """`?columns=all`: every column in its declared order; else the user's choice, in its order."""
    if request.GET.get("columns") == "all":
        return table_class.column_names()
    return table_class.chosen_columns(request.user)


CHUNK_ROWS = 1000
# An `export_fields` table's rows are tuples, written a column at a time (a C loop per column, not a Python
# call per cell), so a chunk may be larger: fewer hops to the worker thread, memory still flat.
VALUES_CHUNK_ROWS = 2500


def csv_writer_rows(getters: Sequence[Callable[[Any], Any]], cell: Callable[[Any], str] | None = None
                    ) -> Callable[[list], list[list]]:
    """A function turning a batch of records into rows of cells, `csv_cell` of each getter's value. The
    commonest cells skip the call: a text that cannot be read as a formula, a non-negative int (written as
    is by the csv module) and None (written empty); the others go through `csv_cell`, so that the text is
    the same."""
    cell = cell or csv_cell
    starts = FORMULA_STARTS

    def rows(batch: list) -> list[list]:
        # One pass per row: each value read and judged in the same comprehension.
        return [[v if ((c := (v := get(record)).__class__) is str and not v.startswith(starts))
                 or (c is int and v >= 0) or v is None else cell(v) for get in getters] for record in batch]

    return rows


def csv_column_rows(table: ConsoleTable, fields: Sequence[str], cells: Sequence[tuple[str, Callable[[Any], Any]]]
                    ) -> Callable[[list[Sequence]], list[tuple]]:
    """A function turning a batch of `values()` rows given as columns (one per field of `fields`) into rows
    of cell texts, made a column at a time: a field as is when none of its texts starts like a formula
    (one C loop), else through its memo; a cell of `export_depends` through its memo (`CellMemo`); any other
    export getter reads each row as a dict. `cells`: (column or part, getter) in the CSV's order. The texts
    are `csv_cell`'s."""
    at = {field: i for i, field in enumerate(fields)}
    plan: list[tuple[str, Any, Any]] = []
    for name, get in cells:
        depends = table.export_depends.get(name)
        field = _export_field(table, name)
        if depends:
            where = at[depends[0]] if len(depends) == 1 else [at[f] for f in depends]
            plan.append(("memo", where, CellMemo(_depends_text(get, depends, csv_cell))))
        elif field is not None:
            plan.append(("field", at[field], CellMemo(csv_cell)))
        else:
            plan.append(("row", get, None))
    starts = repeat(FORMULA_STARTS)

    def rows(columns: list[Sequence]) -> list[tuple]:
        dicts = None
        out = []
        for kind, where, memo in plan:
            if kind == "field":
                values = columns[where]
                try:
                    plain = not any(map(str.startswith, values, starts))
                except TypeError:  # not all texts (numbers, None): each distinct value through the memo
                    plain = False
                out.append(values if plain else memo.cells(values))
            elif kind == "memo":
                keys = columns[where] if isinstance(where, int) else list(zip(*(columns[i] for i in where)))
                out.append(memo.cells(keys))
            else:
                if dicts is None:
                    dicts = [dict(zip(fields, row)) for row in zip(*columns)]
                out.append([csv_cell(where(row)) for row in dicts])
        return list(zip(*out))

    return rows


def values_columns(queryset: QuerySet, size: int) -> tuple[list[str], Iterator[list[Sequence]]]:
    """(field names, chunks of rows) of a `values()` queryset, each chunk as columns (one per field), read
    `size` rows at a time as Django's own iterator reads them (a server-side cursor where the database has
    one), without building a dict per row nor running the converters row by row: a field's converters (a
    Decimal, a date, a bool from SQLite) run over its column. Close the generator to close the cursor."""
    query = queryset.query
    # The names in the order of the row's columns, as Django's ValuesIterable reads them.
    names = list(query.selected) if query.selected else [*query.extra_select, *query.values_select,
                                                          *query.annotation_select]
    compiler = query.get_compiler(using=queryset.db)
    results = compiler.execute_sql(MULTI, chunked_fetch=True, chunk_size=size)
    converters = compiler.get_converters([column[0] for column in compiler.select[:compiler.col_count]])
    connection = compiler.connection

    def chunks() -> Iterator[list[Sequence]]:
        try:
            for chunk in results:
                columns: list[Sequence] = list(zip(*chunk))
                for i, (functions, expression) in converters.items():
                    for convert in functions:
                        columns[i] = [convert(value, expression, connection) for value in columns[i]]
                yield columns
        finally:
            if hasattr(results, "close"):  # the cursor, when the rows stop early
                results.close()

    return names, chunks()


class CsvText:
    """The CSV text of rows, through one csv writer (its buffer emptied after each batch)."""

    def __init__(self):
        self.buffer = io.StringIO()
        self.writer = csv.writer(self.buffer, lineterminator="\r\n")

    def rows(self, rows: Iterable[Sequence[Any]]) -> str:
        self.writer.writerows(rows)
        text = self.buffer.getvalue()
        self.buffer.seek(0)
        self.buffer.truncate()
        return text

    def texts(self, rows: list[Sequence[str]], width: int) -> str:
        """`rows(rows)` of rows of `width` texts each. The csv module quotes a cell only when it holds a
        comma, a quote or a line break (or is a row's only cell, empty): when none does, the cells joined
        are its text, made in a tenth of the time. Whether one does is read from the joined text."""
        if width > 1:
            text = "\r\n".join(map(",".join, rows)) + "\r\n"
            count = len(rows)
            if (text.count(",") == count * (width - 1) and text.count("\n") == count
                    and text.count("\r") == count and '"' not in text):
                return text
        return self.rows(rows)


async def csv_rows(table: ConsoleTable, queryset: QuerySet, names: Sequence[str]) -> AsyncIterator[str]:
    """The CSV text, a chunk of rows at a time, read from the database in chunks (flat memory): each
    chunk is read and written in one go in a worker thread (the event loop only passes the text on)."""
    cells, header = [], []
    for name in names:
        if name in table.csv_parts:
            for part, label in table.csv_parts[name]:
                cells.append((part, getattr(table, f"export_{part}")))
                header.append(label)
        else:
            cells.append((name, _getter(table, name)))
            header.append(type(table).column_label(name))
    out = CsvText()
    yield out.rows([[csv_cell(label) for label in header]])

    if not isinstance(queryset, QuerySet):  # rows already in memory (small tables sorted in Python)
        enrich = table.enricher()
        to_rows = csv_writer_rows([get for _, get in cells])
        for start in range(0, len(queryset), CHUNK_ROWS):
            batch = list(queryset[start:start + CHUNK_ROWS])
            if enrich is not None:
                enrich(batch)
            yield out.rows(to_rows(batch))
        return

    if table.export_fields is not None:
        # Tuples with every computed value from the same query, written a column at a time.
        def start() -> Iterator[str]:
            fields, chunks = values_columns(table.export_values(queryset), VALUES_CHUNK_ROWS)
            to_rows = csv_column_rows(table, fields, cells)
            try:
                for chunk in chunks:
                    yield out.texts(to_rows(chunk), len(cells))
            finally:
                chunks.close()
    else:
        def start() -> Iterator[str]:
            enrich, to_rows = table.enricher(), csv_writer_rows([get for _, get in cells])
            records = queryset.iterator(chunk_size=2 * CHUNK_ROWS)
            try:
                while batch := list(islice(records, CHUNK_ROWS)):
                    if enrich is not None:
                        enrich(batch)
                    yield out.rows(to_rows(batch))
            finally:
                records.close()

    texts: list[Iterator[str]] = []

    def next_text() -> str | None:
        """The next chunk's text (None at the end), read and written in the same thread."""
        if not texts:
            texts.append(start())
        return next(texts[0], None)

    # Thread-sensitive: the database connection is the request's, as for every other read of the view.
    step = sync_to_async(next_text)
    done = False
    try:
        while (text := await step()) is not None:
            yield text
        done = True
    finally:
        if texts and not done:  # the download stopped early: close the cursor in its thread
            await sync_to_async(texts[0].close)()


def _file_part(text: str) -> str:
    """A name as a safe part of a file name: letters, digits, dot, dash and underscore only."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-.")


def csv_filename(table: str, *, cluster: str | None = None, at: datetime | None = None) -> str:
    """`nodes_demo_2026-11-23T1530Z.csv`: the table, the cluster when the view is one cluster's, the time (UTC)."""
    at = (at or django_timezone.now()).astimezone(timezone.utc)
    parts = [_file_part(table) or "export"]
    if cluster and _file_part(cluster):
        parts.append(_file_part(cluster))
    parts.append(at.strftime("%Y-%m-%dT%H%MZ"))
    return "_".join(parts) + ".csv"


def csv_response(request, table_class: type[ConsoleTable], queryset: QuerySet, *, filename: str,
                 default_order: str | None = None, cluster: str | None = None,
                 **table_kwargs: Any) -> StreamingHttpResponse:
    """Stream the current view of a table (columns, filters, sort; only visible rows) as CSV, named
    by `csv_filename(filename, cluster=cluster)`.

    The queryset must already be restricted and filtered; the sort comes from `?sort=` exactly as for
    the HTML table. The body is an async generator: under ASGI, Django streams it without buffering.
    """
    names = csv_columns(request, table_class)
    table = table_class(queryset, request=None, order_by=default_order, **table_kwargs)
    sort = request.GET.get("sort")
    if sort:
        table.order_by = sort
    ordered = table.data.data  # the queryset, sorted the way the table sorts it
    response = StreamingHttpResponse(csv_rows(table, ordered, names), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{csv_filename(filename, cluster=cluster)}"'
    response["Cache-Control"] = "no-store"
    return response


def wants_csv(request) -> bool:
    return request.GET.get("format") == "csv"
