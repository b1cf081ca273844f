"""Helpers of the page tests: read tables and texts of a response the way a user sees them."""
from __future__ import annotations

import csv
import io
import re
import warnings
from html import unescape

ROLES = ["sysadmin", "rnd_admin", "rnd_viewer", "proj_admin", "researcher", "cluster_viewer", "nobody"]


def text(html: str) -> str:
    """What a user reads: tags dropped, entities decoded, white space collapsed."""
    inline = re.sub(r"</?(a|span|strong|em|code|abbr)\b[^>]*>", "", html)
    return re.sub(r"\s+", " ", unescape(re.sub(r"<[^>]+>", " ", inline))).strip()


def _without_chart_tables(html: str) -> str:
    # A chart's figures as a table (ui/_chart.html) is not the page's table.
    return re.sub(r'<details class="chart-figures">.*?</details>', "", html, flags=re.S)


def table_rows(response, table_id: str | None = None) -> list[list[str]]:
    """Body rows of the first table (or the table with this id) as lists of cell texts."""
    html = _without_chart_tables(response.content.decode())
    if table_id:
        match = re.search(rf'<table[^>]*id="{table_id}".*?</table>', html, re.S)
        html = match.group(0) if match else ""
    else:
        match = re.search(r"<table.*?</table>", html, re.S)
        html = match.group(0) if match else ""
    if "<tbody" not in html:
        return []
    body = html.split("<tbody", 1)[1]
    rows = []
    for row in re.findall(r"<tr[^>]*>(.*?)</tr>", body, re.S):
        cells = [text(c) for c in re.findall(r"<t[dh][^>]*>(.*?)</t[dh]>", row, re.S)]
        if len(cells) == 1 and cells[0].startswith("Nothing to show"):
            continue  # the table's "no rows" line
        rows.append(cells)
    return rows


def headers(response) -> list[str]:
    html = _without_chart_tables(response.content.decode())
    thead = re.search(r"<thead.*?</thead>", html, re.S)
    return [text(c) for c in re.findall(r"<th[^>]*>(.*?)</th>", thead.group(0), re.S)] if thead else []


def first_column(response, table_id: str | None = None) -> list[str]:
    return [row[0] for row in table_rows(response, table_id) if row]


def page_text(response) -> str:
    return text(response.content.decode())


def csv_of(response) -> list[list[str]]:
    """The rows of a (streamed) CSV download."""
    with warnings.catch_warnings():
        # The test client is synchronous: Django consumes the async stream for it (and says so).
        warnings.simplefilter("ignore")
        body = b"".join(response)
    return list(csv.reader(io.StringIO(body.decode("utf-8"))))


def login(client, users, role):
    client.force_login(users[role])
    return users[role]


def htmx(client, url, target="table", **extra):
    return client.get(url, HTTP_HX_REQUEST="true", HTTP_HX_TARGET=target, **extra)


_AFTER = re.compile(r'hx-get="([^"]+)" hx-trigger="load" hx-swap="none"')
_OOB = re.compile(r'<span id="([^"]+)" hx-swap-oob="true"[^>]*>(.*?)</span>\n', re.S)


def after_load(client, url, **params) -> str:
    """The page at `url` as a person sees it once loaded: the sections it fetches after it (`hx-trigger="load"`,
    answered with elements swapped out of band by their id) put in place, as htmx does."""
    html = client.get(url, params).content.decode()
    found = _AFTER.search(html)
    if not found:
        return html
    fragment = client.get(unescape(found.group(1))).content.decode()
    for element_id, inner in _OOB.findall(fragment):
        html, n = re.subn(rf'<span id="{re.escape(element_id)}"[^>]*>.*?</span>(?=</td>)',
                          lambda _: f'<span id="{element_id}">{inner}</span>', html, count=1, flags=re.S)
    return html
