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
from itertools import islice
from operator import itemgetter
from typing import Any, AsyncIterator, Callable, Sequence

import django_tables2 as tables
import django_tables2.utils
from asgiref.sync import sync_to_async
from django.db.models import QuerySet
from django.http import StreamingHttpResponse
from django.utils.html import conditional_escape
from django.utils.safestring import mark_safe
from django.utils import timezone as django_timezone
from django_tables2 import RequestConfig
from django_tables2.utils import Accessor

from common import caches
from common.csv import FORMULA_STARTS, escape_cell
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


class ConsoleTable(tables.Table):
    key: str = ""
    default_columns: Sequence[str] = ()
    # Optional: fills computed attributes of a list of records in place (a grouped query per page,
    # instead of a subquery per row).
    enrich: Callable[[list], Any] | None = None
    # Optional, for large exports: the CSV reads plain dicts (no model instances) from
    # `export_values(queryset)`, `queryset.values(*export_fields)` unless a table adds the computed
    # values it needs to the same query; its export getters read those dicts.
    export_fields: Sequence[str] | None = None
    # Optional: a column the CSV writes as several, `{name: ((part, header), ...)}`, each part read by
    # `export_<part>(record)` (e.g. "Ready/total GPU devices" as two numbers, not a date-like "4/4").
    csv_parts: dict[str, Sequence[tuple[str, str]]] = {}
    # Optional, for large exports of `export_fields` rows: `{column or part: (field, ...)}`, a cell whose text
    # depends only on those fields of the row; the export writes each distinct value's text once and reuses
    # it (a fleet's nodes share a few CPU, memory and GPU sizes: rounding and formatting them per row was most
    # of the CSV's time). The text is the same as the getter's, through `csv_cell`.
    export_depends: dict[str, Sequence[str]] = {}

    def export_values(self, queryset: QuerySet) -> QuerySet:
        """The rows of the export as dicts, in one query (building it must not read the database)."""
        return queryset.values(*self.export_fields)

    def body_html(self):
        """The <tr> rows of the current page as one string: the same cells django-tables2 renders,
        without a template round-trip per cell (a page of 50 rows × 15 columns stays fast)."""
        columns = list(self.columns)
        tds = [f"<td {c.attrs['td'].as_html()}>" if c.attrs.get("td") else "<td>" for c in columns]
        defaults = [c.default for c in columns]
        parts = []
        for row in self.paginated_rows:
            parts.append(f"<tr {row.attrs.as_html()}>")
            render = row._call_render
            for td, column, default in zip(tds, columns, defaults):
                parts.append(td)
                # What BoundRow.get_cell(name) does, with the bound column already in hand (looking it up
                # by name walks the table's columns once per cell).
                parts.append(conditional_escape(row._get_and_render_with(column, render_func=render, default=default)))
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
    column = table.base_columns[name]
    accessor = column.accessor or Accessor(name)
    if table.export_fields is not None:
        return itemgetter(str(accessor).replace(".", "__"))
    if "." not in accessor and "__" not in accessor:
        return lambda record: getattr(record, accessor, None)
    return lambda record: accessor.resolve(record, quiet=True)


MEMO_MOST = 4096  # distinct values remembered per column: memory stays flat whatever the rows


def memo_getter(get: Callable[[Any], Any], fields: Sequence[str], cell: Callable[[Any], str] | None = None
                ) -> Callable[[Any], str]:
    """`cell(get(row))` (the cell's text), computed once per distinct value of `fields` of the row (a dict)
    and remembered (up to MEMO_MOST values)."""
    cell = cell or csv_cell
    memo: dict[Any, str] = {}
    if len(fields) == 1:
        key_of = itemgetter(fields[0])
    else:
        key_of = itemgetter(*fields)

    def getter(row):
        key = key_of(row)
        try:
            return memo[key]
        except KeyError:
            text = cell(get(row))
            if len(memo) < MEMO_MOST:
                memo[key] = text
            return text
        except TypeError:  # an unhashable value: computed every time
            return cell(get(row))

    return getter


def csv_columns(request, table_class: type[ConsoleTable]) -> list[str]:
    """`?columns=all`: every column in its declared order; else the user's choice, in its order."""
    if request.GET.get("columns") == "all":
        return table_class.column_names()
    return table_class.chosen_columns(request.user)


CHUNK_ROWS = 1000


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


async def csv_rows(table: ConsoleTable, queryset: QuerySet, names: Sequence[str]) -> AsyncIterator[str]:
    """The CSV text, a thousand rows at a time, read from the database in chunks (flat memory): each
    chunk is read and written in one go in a worker thread (the event loop only passes the text on)."""
    getters, header = [], []
    plain = table.export_fields is not None and isinstance(queryset, QuerySet)  # rows are dicts
    depends = table.export_depends if plain else {}
    for name in names:
        if name in table.csv_parts:
            for part, label in table.csv_parts[name]:
                get = getattr(table, f"export_{part}")
                getters.append(memo_getter(get, depends[part]) if part in depends else get)
                header.append(label)
        else:
            get = _getter(table, name)
            getters.append(memo_getter(get, depends[name]) if name in depends else get)
            header.append(type(table).column_label(name))
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\r\n")
    writer.writerow([csv_cell(label) for label in header])
    yield buffer.getvalue()
    buffer.seek(0)
    buffer.truncate()
    enrich = table.enricher()
    if table.export_fields is not None and isinstance(queryset, QuerySet):
        # Plain dicts with every computed value from the same query: no per-batch database reads.
        queryset = table.export_values(queryset)
        enrich = None
    to_rows = csv_writer_rows(getters)

    def write(batch: list) -> str:
        if enrich is not None:
            enrich(batch)
        writer.writerows(to_rows(batch))
        text = buffer.getvalue()
        buffer.seek(0)
        buffer.truncate()
        return text

    if isinstance(queryset, QuerySet):
        records = queryset.iterator(chunk_size=2 * CHUNK_ROWS)

        def next_chunk() -> str | None:
            """The next CSV_CHUNK_ROWS rows' text (None at the end), read and written in the same thread."""
            batch = list(islice(records, CHUNK_ROWS))
            return write(batch) if batch else None

        # Thread-sensitive: the database connection is the request's, as for every other read of the view.
        step = sync_to_async(next_chunk)
        try:
            while (text := await step()) is not None:
                yield text
        finally:
            await sync_to_async(records.close)()
    else:  # rows already in memory (small tables sorted in Python)
        for start in range(0, len(queryset), CHUNK_ROWS):
            yield write(list(queryset[start:start + CHUNK_ROWS]))


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
