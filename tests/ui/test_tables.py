"""The shared table machinery: partial or whole page, page size, CSV columns and file name, the reasons cell."""
from __future__ import annotations

import re
from datetime import datetime, timezone

import pytest
from django.urls import reverse

from nodepools.models import Node
from tests.pages import csv_of, first_column, login, table_rows, text
from ui.tables import PER_PAGE_CHOICES, csv_filename, per_page_from


def many_nodes(org, count: int) -> None:
    from kubesim import make_node

    org.nodes += [make_node(f"n-{i:03d}", gpus=1) for i in range(count)]
    org.load()


# --- Partial or whole page -------------------------------------------------------------------------

TABLE_PAGES = ["node-list", "pool-list", "department-list", "project-list", "audit-events", "usage-history"]


@pytest.mark.parametrize("name", TABLE_PAGES)
def test_htmx_request_gets_the_table_partial_and_a_boosted_link_the_whole_page(client, org, users, name):
    login(client, users, "sysadmin")
    url = reverse(name)
    partial = client.get(url, HTTP_HX_REQUEST="true", HTTP_HX_TARGET="table").content.decode()
    assert partial.lstrip().startswith('<div id="table"') and "<html" not in partial
    # A link a person follows (boosted), whatever element it names as target, is answered by the whole page.
    for target in ("table", "", "body"):
        headers = {"HTTP_HX_REQUEST": "true", "HTTP_HX_BOOSTED": "true"}
        if target:
            headers["HTTP_HX_TARGET"] = target
        whole = client.get(url, **headers).content.decode()
        assert whole.count('<header class="topbar">') == 1 and "<h1>" in whole, (name, target)
    # So is "back" to a page htmx no longer holds in its history cache (it swaps the answer into <body>).
    whole = client.get(url, HTTP_HX_REQUEST="true", HTTP_HX_HISTORY_RESTORE_REQUEST="true").content.decode()
    assert whole.count('<header class="topbar">') == 1 and "<h1>" in whole


@pytest.mark.parametrize("name", ["pool-detail", "node-detail", "cluster-overview", "quota-grid"])
def test_detail_pages_give_the_partial_only_to_unboosted_htmx(client, org, users, name):
    login(client, users, "sysadmin")
    pk = {"pool-detail": org.a100.pk, "node-detail": Node.objects.get(name="a100-1").pk,
          "cluster-overview": org.cluster.pk, "quota-grid": org.cluster.pk}[name]
    url = reverse(name, args=[pk])
    partial = client.get(url, HTTP_HX_REQUEST="true", HTTP_HX_TARGET="table").content.decode()
    assert partial.lstrip().startswith('<div id="table"') and "<header" not in partial
    whole = client.get(url, HTTP_HX_REQUEST="true", HTTP_HX_BOOSTED="true", HTTP_HX_TARGET="table").content.decode()
    assert whole.count('<header class="topbar">') == 1


def test_table_links_leave_as_plain_links_and_sort_links_swap_the_table(client, org, users):
    login(client, users, "sysadmin")
    html = client.get(reverse("node-list")).content.decode()
    table = re.search(r'<div id="table".*', html, re.S).group(0)
    assert "hx-boost" not in table.split(">", 1)[0]
    node = Node.objects.get(name="a100-1")
    # The node link is a plain link (the whole node page); the sort link fetches the partial into #table.
    assert re.search(rf'<a href="/nodes/{node.pk}/">a100-1</a>', table)
    assert re.search(r'<a href="\?sort=name" hx-get="\?sort=name" hx-target="#table" hx-swap="outerHTML" '
                     r'hx-push-url="true">Node</a>', table)


# --- Cross-links -------------------------------------------------------------------------------------

def test_nodes_table_links_the_pool_and_the_cluster(client, org, users):
    from nodepools.tables import NodeTable
    from ui import services

    login(client, users, "sysadmin")
    services.table_preference_set(user=users["sysadmin"], table="nodes", columns=["name", "pool", "cluster"],
                                  allowed=NodeTable.column_names())
    html = client.get(reverse("node-list"), {"q": "a100-1"}).content.decode()
    assert f'<a href="/pools/{org.a100.pk}/">a100</a>' in html
    assert f'<a href="/clusters/{org.cluster.pk}/">lab</a>' in html
    html = client.get(reverse("project-list"), {"q": "rnd-a"}).content.decode()
    assert f'<a href="/departments/{org.rnd.pk}/">rnd</a>' in html
    assert f'<a href="/clusters/{org.cluster.pk}/">lab</a>' in html
    html = client.get(reverse("department-list")).content.decode()
    assert f'<a href="/clusters/{org.cluster.pk}/">lab</a>' in html
    html = client.get(reverse("pool-list")).content.decode()
    assert f'<a href="/clusters/{org.cluster.pk}/">lab</a>' in html


# --- Page size ---------------------------------------------------------------------------------------

def test_per_page_accepts_only_the_offered_sizes():
    assert PER_PAGE_CHOICES == (25, 50, 100, 500)
    for n in PER_PAGE_CHOICES:
        assert per_page_from({"per_page": str(n)}) == (n, "")
    assert per_page_from({}) == (None, "")
    for bad in ["abc", "7", "100000", "-5", "0", "25.0", "1e3"]:
        chosen, message = per_page_from({"per_page": bad})
        assert chosen is None
        assert message == (f"per_page: “{bad}” is not an allowed page size; choose one of 25, 50, 100, 500. "
                           "Showing 50 rows per page.")
    chosen, message = per_page_from({"pods-per_page": "9"}, prefix="pods-")
    assert chosen is None and message.startswith("pods-per_page: “9”")


def test_page_size_is_chosen_in_the_page_and_kept_in_the_links(client, org, users):
    many_nodes(org, 60)
    login(client, users, "sysadmin")
    url = reverse("node-list")
    response = client.get(url, {"sort": "name"})
    assert len(table_rows(response)) == 50
    html = response.content.decode()
    for n in (25, 100, 500):
        assert f'href="?sort=name&amp;per_page={n}"' in html
    assert '<strong aria-current="true">50</strong>' in html
    response = client.get(url, {"sort": "name", "per_page": 25, "page": 2})
    assert len(table_rows(response)) == 25 and first_column(response)[0] == "n-023"
    html = response.content.decode()
    # Page and sort links keep the size; choosing a size starts at page 1; the filter form carries it.
    assert 'href="?sort=name&amp;per_page=25&amp;page=3"' in html
    assert 'href="?sort=name&amp;per_page=100"' in html
    assert '<input type="hidden" name="per_page" value="25" form="table-filters">' in html
    assert len(table_rows(client.get(url, {"per_page": 100}))) == 64


@pytest.mark.parametrize("bad", ["abc", "7", "100000", "-5"])
def test_an_invalid_page_size_says_so_and_falls_back(client, org, users, bad):
    from urllib.parse import unquote

    many_nodes(org, 60)
    login(client, users, "sysadmin")
    value = unquote(bad)
    response = client.get(reverse("node-list"), {"per_page": value})
    assert response.status_code == 200
    assert len(table_rows(response)) == 50
    assert "per_page: “" in text(response.content.decode())
    assert "is not an allowed page size; choose one of 25, 50, 100, 500. Showing 50 rows per page." in text(
        response.content.decode())
    assert 'name="per_page"' not in response.content.decode()  # not carried on into the filters
    # The same table code serves the htmx partial, the CSV (every row, whatever the page size) and the API.
    partial = client.get(reverse("node-list"), {"per_page": value}, HTTP_HX_REQUEST="true", HTTP_HX_TARGET="table")
    assert partial.status_code == 200 and "is not an allowed page size" in partial.content.decode()
    rows = csv_of(client.get(reverse("node-list"), {"per_page": value, "format": "csv"}))
    assert len(rows) == 65
    for path in ("/api/v1/nodes/", "/api/v1/node-pools/"):
        assert client.get(path, {"per_page": value, "page_size": value}).status_code == 200


def test_a_control_character_in_the_page_size_is_refused_naming_the_field(client, org, users):
    # Control characters are refused everywhere, query strings included (issue 19), before any view runs.
    login(client, users, "sysadmin")
    response = client.get(reverse("node-list"), {"per_page": "\x00"})
    assert response.status_code == 400
    page = text(response.content.decode())
    assert "The field “per_page” cannot be accepted" in page and "U+0000 (NUL)" in page


def test_an_invalid_page_size_of_a_detail_pages_table_says_so(client, org, users):
    login(client, users, "sysadmin")
    node = Node.objects.get(name="a100-1")
    response = client.get(reverse("node-detail", args=[node.pk]), {"pods-per_page": "abc"})
    assert response.status_code == 200
    assert "pods-per_page: “abc” is not an allowed page size" in text(response.content.decode())
    response = client.get(reverse("pool-detail", args=[org.a100.pk]), {"nodes-per_page": "7"})
    assert response.status_code == 200 and "nodes-per_page: “7” is not an allowed page size" in text(
        response.content.decode())


# --- CSV ---------------------------------------------------------------------------------------------

def test_csv_file_name_carries_table_cluster_and_time():
    at = datetime(2026, 11, 23, 15, 30, 59, tzinfo=timezone.utc)
    assert csv_filename("nodes", cluster="demo", at=at) == "nodes_demo_2026-11-23T1530Z.csv"
    assert csv_filename("node-pools", at=at) == "node-pools_2026-11-23T1530Z.csv"
    # Whatever a cluster is called, the header stays one safe file name.
    assert csv_filename("nodes", cluster='a"b/c\r\nd é', at=at) == "nodes_a-b-c-d_2026-11-23T1530Z.csv"


def test_csv_file_name_names_the_filtered_cluster_or_the_only_visible_one(client, org, users):
    from nodepools import services as pool_services

    disposition = r'attachment; filename="{}_\d{{4}}-\d\d-\d\dT\d{{4}}Z\.csv"'
    login(client, users, "sysadmin")
    response = client.get(reverse("node-list"), {"format": "csv"})
    assert re.fullmatch(disposition.format("nodes_lab"), response["Content-Disposition"])
    other = pool_services.cluster_create(actor=None, name="other")
    response = client.get(reverse("node-list"), {"format": "csv"})
    assert re.fullmatch(disposition.format("nodes"), response["Content-Disposition"])
    response = client.get(reverse("pool-list"), {"format": "csv", "cluster": other.pk})
    assert re.fullmatch(disposition.format("node-pools_other"), response["Content-Disposition"])
    response = client.get(reverse("project-list"), {"format": "csv", "cluster": org.cluster.pk})
    assert re.fullmatch(disposition.format("projects_lab"), response["Content-Disposition"])


def test_nodes_csv_has_ready_and_total_gpu_devices_apart_and_every_reason(client, org, users):
    from kubesim import make_node

    org.nodes[0] = make_node("v100-1", gpus=4, unschedulable=True, conditions={"MemoryPressure": "True"})
    org.load()
    login(client, users, "sysadmin")
    rows = csv_of(client.get(reverse("node-list"), {"sort": "name", "format": "csv"}))
    header = rows[0]
    assert "Ready/total GPU devices" not in header
    ready, total, status = header.index("Ready GPU devices"), header.index("Total GPU devices"), header.index("Status")
    assert total == ready + 1
    by_name = {row[0]: row for row in rows[1:]}
    assert (by_name["a100-1"][ready], by_name["a100-1"][total]) == ("4", "4")
    assert (by_name["v100-1"][ready], by_name["v100-1"][total]) == ("0", "4")
    assert by_name["v100-1"][status] == "Not ready (Memory pressure; Scheduling disabled)"
    # The page keeps one cell.
    html = client.get(reverse("node-list"), {"sort": "name"}).content.decode()
    assert "Ready/total GPU devices" in html


def test_a_reason_starting_like_a_formula_is_escaped_in_the_csv(client, org, users):
    from nodepools.models import NodeStatus

    Node.objects.filter(name="v100-2").update(status=NodeStatus.NOT_READY, status_reasons=["=cmd()", "x"])
    login(client, users, "sysadmin")
    rows = csv_of(client.get(reverse("node-list"), {"q": "v100-2", "format": "csv"}))
    assert rows[1][1] == "Not ready (=cmd(); x)"  # not at the start of the cell: nothing to run
    Node.objects.filter(name="v100-2").update(name="=v100-2")
    rows = csv_of(client.get(reverse("node-list"), {"q": "=v100-2", "format": "csv"}))
    assert rows[1][0] == "'=v100-2"


# --- The reasons cell --------------------------------------------------------------------------------

def test_reasons_cell_one_reason_no_disclosure_several_a_disclosure(client, org, users):
    from nodepools.models import NodeStatus

    Node.objects.filter(name="v100-1").update(status=NodeStatus.NOT_READY, status_reasons=["Memory pressure"])
    Node.objects.filter(name="v100-2").update(status=NodeStatus.NOT_READY,
                                               status_reasons=["Memory pressure", "Disk pressure", "<b>x</b>"])
    login(client, users, "sysadmin")
    response = client.get(reverse("node-list"), {"sort": "name", "status": "not_ready"})
    cells = {row[0]: row[1] for row in table_rows(response)}
    assert cells == {"v100-1": "Not ready (Memory pressure)",
                     "v100-2": "Not ready (Memory pressure) +2 Memory pressure Disk pressure <b>x</b>"}
    html = response.content.decode()
    assert html.count("<details class=\"reasons-popover\">") == 1
    assert '<summary aria-label="Not ready (Memory pressure): 3 not-ready reasons">' in html
    assert "<li>&lt;b&gt;x&lt;/b&gt;</li>" in html


def test_pages_vary_on_hx_request_so_back_never_shows_a_cached_fragment(client, org, users):
    login(client, users, "sysadmin")
    for url in (reverse("node-list"), reverse("pool-detail", args=[org.a100.pk])):
        for headers in ({}, {"HTTP_HX_REQUEST": "true", "HTTP_HX_TARGET": "table"}):
            assert "HX-Request" in client.get(url, **headers)["Vary"]


def test_a_remembered_cell_reads_as_the_cell_itself_and_memory_stays_bounded(monkeypatch):
    """The CSV writes a cell that depends on a few fields once per distinct value (ConsoleTable.export_depends):
    the same text as `csv_cell` of the getter's value, a formula still neutralised, at most MEMO_MOST kept."""
    from decimal import Decimal

    import django_tables2 as tables

    import ui.tables as ui_tables

    monkeypatch.setattr(ui_tables, "MEMO_MOST", 3)
    calls = []

    class Cores(ui_tables.ConsoleTable):
        name = tables.Column("Node")
        cpu = tables.Column("CPU (cores)")
        size = tables.Column("Size")
        export_fields = ("name", "m", "d")
        export_depends = {"cpu": ("m",), "size": ("d", "m")}

        def export_cpu(self, row):
            calls.append(row["m"])
            return round(row["m"] / 1000, 2) if row["m"] is not None else None

        def export_size(self, row):
            return row["d"]

    table = Cores([])
    cells = [(name, ui_tables._getter(table, name)) for name in ("name", "cpu", "size")]
    rows = ui_tables.csv_column_rows(table, ["name", "m", "d"], cells)
    ms = (96000, 1500, 96000, None, 250, 7, 7, 96000)
    names = ("a", "=SUM(A1)", "-1", "b", "c", "d", "e", "f")
    sizes = (Decimal("8.000"), None, Decimal("8"), Decimal("-2"), 1.5, 1.25, 0, -0.5)
    written = rows([names, ms, sizes])
    assert written == [(ui_tables.csv_cell(n), ui_tables.csv_cell(table.export_cpu({"m": m})), ui_tables.csv_cell(d))
                       for n, m, d in zip(names, ms, sizes)]
    assert [row[0] for row in written[:3]] == ["a", "'=SUM(A1)", "'-1"]  # a formula neutralised
    assert written[0][2] == "8" and written[3][2] == "'-2"
    assert calls.count(96000) == 1 + 3  # once remembered (the three checks above aside)
    assert calls.count(7) == 2 + 2      # past MEMO_MOST values: computed every time, never kept
    # Plain texts are written as they are; an unhashable value is written, not remembered.
    memo = ui_tables.CellMemo(ui_tables.csv_cell)
    assert memo.cells([["x", 1], ["x", 1]]) == ["x; 1", "x; 1"] and not memo


def test_cells_without_quotes_are_joined_as_the_csv_module_writes_them():
    """CsvText.texts joins the cells when none needs quoting: the text must be the csv module's, whatever
    the characters (commas, quotes, line breaks, NUL, an empty cell, a row of one cell)."""
    import csv
    import io

    from ui.tables import CsvText

    def module(rows):
        buffer = io.StringIO()
        csv.writer(buffer, lineterminator="\r\n").writerows(rows)
        return buffer.getvalue()

    out = CsvText()
    for c in [*map(chr, range(0x3000)), "\U0001f4dd", "\r\n"]:
        rows = [(f"a{c}b", c, f"{c}x", ""), ("n-1", "Ready", "", "4")]
        assert out.texts(rows, 4) == module(rows), repr(c)
    for rows in ([("",)], [("x",), ("",)], [("a", "b")]):
        assert out.texts(rows, len(rows[0])) == module(rows)


def test_rows_read_a_column_at_a_time_are_the_querysets_values(org):
    """values_columns reads a values() queryset's rows in chunks, as columns, with Django's converters
    applied (a Decimal, a date, a bool from SQLite): the same values as the queryset gives."""
    from decimal import Decimal

    from django.db.models import F

    from ui.tables import values_columns

    Node.objects.filter(name="a100-1").update(usage_gpus=Decimal("1.5"))
    nodes = Node.objects.annotate(pool_name=F("pool__name")).order_by("name").values(
        "name", "usage_gpus", "updated", "unschedulable", "pool_name", "gpu_memory_mib")
    names, chunks = values_columns(nodes, 2)
    read = [dict(zip(names, row)) for columns in chunks for row in zip(*columns)]
    assert read == list(nodes) and len(read) > 2
    assert {type(row["usage_gpus"]) for row in read} == {Decimal}
    assert {type(row["unschedulable"]) for row in read} == {bool}
    names, chunks = values_columns(nodes.none(), 2)
    assert list(chunks) == []


def test_a_gpu_count_reads_the_same_as_a_float_as_as_a_decimal():
    """The nodes CSV reads the allocated GPUs (a Decimal of 3 places) as a float (no converter per row): the
    cell's text must not change, sums with a float's rounding noise included."""
    from decimal import Decimal

    from ui.tables import csv_cell

    for text in ("0", "0.5", "0.125", "0.001", "1.25", "7", "8.000", "12.5", "1234.567", "99999999.999"):
        assert csv_cell(float(Decimal(text))) == csv_cell(Decimal(text)), text
    assert csv_cell(0.1 + 0.2) == csv_cell(Decimal("0.3"))
    assert csv_cell(max(8 - 8.0, Decimal(0))) == csv_cell(max(8 - Decimal(8), Decimal(0))) == "0"


# --- Ties in a sort ------------------------------------------------------------------------------------

@pytest.mark.parametrize("sort", ["cpu", "-cpu", "gpu_devices", "-pods"])
def test_rows_that_sort_equal_are_ordered_by_name(client, org, users, sort):
    from kubesim import make_node

    # Created in an order that is not their names' (the database's own order of equal rows is creation's).
    org.nodes += [make_node(name, gpus=1) for name in ("tie-c", "tie-a", "tie-d", "tie-b")]
    org.load()
    login(client, users, "sysadmin")
    names = first_column(client.get(reverse("node-list"), {"q": "tie-", "sort": sort}))
    assert names == ["tie-a", "tie-b", "tie-c", "tie-d"]
    # The CSV of the same view lists them in the same order.
    rows = csv_of(client.get(reverse("node-list"), {"q": "tie-", "sort": sort, "format": "csv"}))
    assert [r[0] for r in rows[1:]] == names


def test_rows_in_memory_that_sort_equal_are_ordered_by_name():
    import django_tables2 as tables

    from ui.tables import ConsoleTable

    class Small(ConsoleTable):
        name = tables.Column()
        size = tables.Column()

    rows = [{"name": n, "size": s} for n, s in (("c", 1), ("a", 2), ("d", 1), ("b", 1))]
    assert [r["name"] for r in Small(list(rows), order_by="size").rows.data] == ["b", "c", "d", "a"]
    assert [r["name"] for r in Small(list(rows), order_by="-size").rows.data] == ["a", "b", "c", "d"]


# --- The cells as django-tables2 makes them ------------------------------------------------------------

def _bodies(html: str) -> list[str]:
    """The tables' rows, each form's CSRF token left out (a new one per page)."""
    html = re.sub(r'name="csrfmiddlewaretoken" value="[^"]*"', 'name="csrfmiddlewaretoken"', html)
    return re.findall(r"<tbody.*?</tbody>", html, re.S)


def test_every_tables_cells_read_as_django_tables2_renders_them(client, org, users, monkeypatch):
    """A table's rows are made column by column, the same way for every row (ui.tables._Cells, _row_attrs): with
    every column of every table shown, each page's rows read exactly as django-tables2's own rendering writes them."""
    from ui import services, tables as ui_tables
    from ui.views import REGISTRY

    org.run("train", org.rnd_a, "a100-1", gpus=2)
    org.run("waits", org.rnd_a, None, gpus=8, phase="Pending")
    admin = login(client, users, "sysadmin")
    for key, table in REGISTRY.items():
        services.table_preference_set(user=admin, table=key, columns=table.column_names(),
                                      allowed=table.column_names())
    node = Node.objects.get(name="a100-1")
    urls = [reverse(name) for name in ("node-list", "pool-list", "department-list", "project-list", "audit-events",
                                       "usage-history", "workload-list")]
    urls += [reverse("node-detail", args=[node.pk]), reverse("pool-detail", args=[org.a100.pk]),
             reverse("cluster-overview", args=[org.cluster.pk]), reverse("department-detail", args=[org.rnd.pk]),
             reverse("project-detail", args=[org.rnd_a.pk])]
    quick = {url: _bodies(client.get(url).content.decode()) for url in urls}

    def as_django_tables2(self, row, record):
        return row._get_and_render_with(self.bound, render_func=row._call_render, default=self.default)

    monkeypatch.setattr(ui_tables._Cells, "html", as_django_tables2)
    monkeypatch.setattr(ui_tables, "_row_attrs", lambda table: None)  # each row's attributes by django-tables2
    rows = 0
    for url in urls:
        bodies = _bodies(client.get(url).content.decode())
        assert bodies == quick[url], url
        rows += sum(body.count("<tr") for body in bodies)
    assert rows > 30  # the pages had rows to compare
