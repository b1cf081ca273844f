"""CSV exports, streamed, with every cell escaped against formula injection (docs/concepts.md#exports).

The one place that writes CSV for the console; pages, API and compliance exports all use it:

    from common.csv import csv_response
    return csv_response("nodes.csv", ["Node", "Status"], ((n.name, n.status_text) for n in nodes))

- `escape_cell(value) -> str`: the text of one cell; a text starting with `=`, `+`, `-`, `@`, tab, CR,
  LF or NUL gets a leading `'` so that spreadsheet programs do not run it as a formula.
- `csv_lines(header, rows) -> Iterator[str]`: the header line then one line per row, escaped.
- `csv_response(filename, header, rows) -> StreamingHttpResponse`: a download that streams `rows`
  (any iterable; pass a generator over `queryset.iterator()` for large exports).
"""
from __future__ import annotations

import csv
import datetime
from decimal import Decimal
from typing import Any, Iterable, Iterator

from django.http import StreamingHttpResponse

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r", "\n", "\0")


def escape_cell(value: Any) -> str:
    """The text of one cell: None is empty, booleans yes/no, datetimes ISO 8601; risky starts get `'`."""
    if value is None:
        text = ""
    elif isinstance(value, bool):
        text = "yes" if value else "no"
    elif isinstance(value, datetime.datetime):
        text = value.isoformat(timespec="seconds")
    elif isinstance(value, Decimal):
        text = format(value, "f")
    else:
        text = str(value)
    if text.startswith(FORMULA_STARTS):
        return "'" + text
    return text


class _Echo:
    """A file-like object whose write() hands back the line, so csv.writer can feed a generator."""

    def write(self, value: str) -> str:
        return value


def csv_lines(header: Iterable[Any], rows: Iterable[Iterable[Any]]) -> Iterator[str]:
    writer = csv.writer(_Echo())
    yield writer.writerow([escape_cell(cell) for cell in header])
    for row in rows:
        yield writer.writerow([escape_cell(cell) for cell in row])


def csv_response(filename: str, header: Iterable[Any], rows: Iterable[Iterable[Any]]) -> StreamingHttpResponse:
    response = StreamingHttpResponse(csv_lines(header, rows), content_type="text/csv; charset=utf-8")
    safe_name = "".join(c for c in filename if c.isalnum() or c in "-_.") or "export.csv"
    response["Content-Disposition"] = f'attachment; filename="{safe_name}"'
    return response
