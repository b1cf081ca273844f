"""What a finance reader needs of a statement besides its lines: a number to quote and the time it was
issued (provisional while its month is open; a revision more when a late correction changes it), the
utilization called the average it is, and idle GPU-hours only where they were measured — on the page, in
the CSV and in the API alike."""
from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest

from ledger import services
from ledger.compute import PodUtilization
from ledger.models import StatementRevision
from nodepools.models import PodLifetime
from tests.ledger.test_closing import run
from tests.ledger.test_statements import A100, MARCH, month  # noqa: F401  (the fixture)
from tests.pages import csv_of

UTC = dt.timezone.utc
LAST_HOUR = dt.datetime(2026, 3, 31, 23, tzinfo=UTC)
CLOSED = dt.datetime(2026, 4, 1, 0, 2, tzinfo=UTC)  # when the month's last hour closed


def close_march(org) -> None:
    """The ledger (begun on the 14th) closes March's last hour at 00:02 on April 1st."""
    services.ledger_state(cluster=org.cluster, now=MARCH)
    from ledger.models import LedgerState

    LedgerState.objects.filter(cluster_id=org.cluster.pk).update(closed_until=LAST_HOUR)
    services.ledger_hour_close(cluster=org.cluster, hour=LAST_HOUR, now=CLOSED)


def finished(at: dt.datetime) -> None:
    """Late news of rnd-a's training (as the sync writes it): it had finished at `at`."""
    PodLifetime.objects.filter(uid="uid-train").update(ended=at, changed=at)


def statement_of(client, path: str, **params):
    """(page's statement, page's HTML, CSV rows, API JSON) of one statement."""
    params = {"month": "2026-03", **params}
    page = client.get(path, params)
    rows = csv_of(client.get(path, {**params, "format": "csv"}))
    api = client.get("/api/v1" + path.rstrip("/"), params).json()
    return page.context["statement"], page.content.decode(), rows, api


def test_an_open_month_s_statement_is_provisional_as_of_now(month, users, client):
    org = month
    client.force_login(users["rnd_admin"])
    statement, html, rows, api = statement_of(client, f"/departments/{org.rnd.pk}/statement/")
    number = f"GPU-2026-03-C{org.cluster.pk}-D{org.rnd.pk}-PROV"
    assert statement.provisional and statement.number == number
    assert number in html and "provisional, as of" in html and "not closed yet" in html
    header = rows[0]
    assert header[-3:] == ["Statement number", "Status", "Issued (UTC)"]
    assert all(r[-3] == number and r[-2] == "provisional" for r in rows[1:])
    assert api["number"] == number and api["provisional"] is True and api["revision"] is None
    assert api["issued_at"]  # as of when it was read
    assert not StatementRevision.objects.exists()


def test_a_closed_month_s_statement_has_its_number_and_the_time_it_was_issued(month, users, client):
    org = month
    close_march(org)
    client.force_login(users["rnd_admin"])
    statement, html, rows, api = statement_of(client, f"/departments/{org.rnd.pk}/statement/")
    number = f"GPU-2026-03-C{org.cluster.pk}-D{org.rnd.pk}-R1"
    assert (statement.number, statement.revision, statement.provisional) == (number, 1, False)
    assert statement.issued_at == CLOSED  # when the month closed, not when it is read
    assert f'data-issue="number">{number}<' in html and "2026-04-01 00:02 UTC (when the month closed)" in html
    assert "provisional" not in html
    assert [r[-3:] for r in rows[1:]] == [[number, "revision 1", "2026-04-01T00:02:00Z"]] * len(rows[1:])
    assert (api["number"], api["revision"], api["provisional"]) == (number, 1, False)
    assert api["issued_at"] == "2026-04-01T00:02:00Z"
    # The cluster's statement: its own number, issued at the same close.
    client.force_login(users["sysadmin"])
    statement, html, rows, api = statement_of(client, f"/clusters/{org.cluster.pk}/statement/")
    assert statement.number == api["number"] == rows[-1][-3] == f"GPU-2026-03-C{org.cluster.pk}-R1"
    assert api["issued_at"] == "2026-04-01T00:02:00Z"


def test_a_late_correction_makes_a_new_revision_of_the_statements_it_changes(month, users, client):
    org = month
    # A correction while March is open is not a revision: the statement is provisional anyway.
    finished(MARCH + dt.timedelta(hours=47))
    services.ledger_hour_correct(cluster=org.cluster, hour=MARCH + dt.timedelta(hours=47),
                                 groups={(org.a100.pk, org.rnd_a.pk)}, now=MARCH + dt.timedelta(hours=49))
    assert not StatementRevision.objects.exists()
    close_march(org)
    client.force_login(users["sysadmin"])
    before = client.get(f"/departments/{org.rnd.pk}/statement/", {"month": "2026-03"}).context["statement"]
    assert before.revision == 1
    # Late news on April 2nd: the training had finished after 40 hours, not 47.
    finished(MARCH + dt.timedelta(hours=40))
    late = dt.datetime(2026, 4, 2, 10, tzinfo=UTC)
    for h in range(40, 47):  # one correction round of several hours: one revision
        services.ledger_hour_correct(cluster=org.cluster, hour=MARCH + dt.timedelta(hours=h),
                                     groups={(org.a100.pk, org.rnd_a.pk)}, now=late)
    statement, html, rows, api = statement_of(client, f"/departments/{org.rnd.pk}/statement/")
    number = f"GPU-2026-03-C{org.cluster.pk}-D{org.rnd.pk}-R2"
    assert statement.totals["gpu_hours"] == before.totals["gpu_hours"] - 14  # 2 GPUs × 7 h fewer
    assert statement.totals["correction_hours"] == -16  # the hour corrected while March was open, and these
    assert (statement.number, statement.issued_at) == (number, late)
    assert number in html and "2026-04-02 10:00 UTC (revision 2" in html
    assert rows[1][-3:] == [number, "revision 2", "2026-04-02T10:00:00Z"]
    assert (api["number"], api["revision"], api["issued_at"]) == (number, 2, "2026-04-02T10:00:00Z")
    # The cluster's statement changed too; ops's did not.
    cluster = client.get(f"/clusters/{org.cluster.pk}/statement/", {"month": "2026-03"}).context["statement"]
    assert (cluster.revision, cluster.issued_at) == (2, late)
    ops = client.get(f"/departments/{org.ops.pk}/statement/", {"month": "2026-03"}).context["statement"]
    assert (ops.number, ops.issued_at) == (f"GPU-2026-03-C{org.cluster.pk}-D{org.ops.pk}-R1", CLOSED)
    # A second late round: a third revision.
    finished(MARCH + dt.timedelta(hours=39))
    services.ledger_hour_correct(cluster=org.cluster, hour=MARCH + dt.timedelta(hours=39),
                                 groups={(org.a100.pk, org.rnd_a.pk)}, now=late + dt.timedelta(days=1))
    again = client.get(f"/api/v1/departments/{org.rnd.pk}/statement", {"month": "2026-03"}).json()
    assert (again["number"], again["issued_at"]) == (number[:-1] + "3", "2026-04-03T10:00:00Z")


MAY = dt.datetime(2026, 5, 4, 10, tzinfo=UTC)
V100 = "Tesla-V100-SXM2-16GB"


@pytest.fixture
def measured(org):
    """An hour of May: rnd-a's training (2 A100) measured by Prometheus — 40 % busy, a quarter of its
    GPU-time idle —, rnd-b's notebook (1 V100) not measured at all. A100 costs 2 EUR."""
    run(org, "train", org.rnd_a, "a100-1", MAY, gpus=2)
    run(org, "notebook", org.rnd_b, "v100-1", MAY)
    services.ledger_hour_close(cluster=org.cluster, hour=MAY, utilization={
        ("runai-rnd-a", "train"): PodUtilization(utilization=40.0, idle_share=0.25)})
    services.rate_create(actor=None, gpu_model=A100, currency="EUR", valid_from=dt.date(2026, 1, 1),
                         gpu_hour=Decimal(2))
    services.rate_create(actor=None, gpu_model=V100, currency="EUR", valid_from=dt.date(2026, 1, 1),
                         gpu_hour=Decimal(1))
    return org


def test_idle_hours_are_shown_where_measured_and_said_not_measured_elsewhere(measured, users, client):
    org = measured
    client.force_login(users["rnd_admin"])
    statement, html, rows, api = statement_of(client, f"/departments/{org.rnd.pk}/statement/", month="2026-05")
    train, notebook = statement.lines
    assert (train.idle_hours, train.idle_cost, train.gpu_utilization) == (Decimal("0.50"), Decimal("1.00"),
                                                                          Decimal("40.0"))
    assert (notebook.idle_hours, notebook.idle_cost, notebook.gpu_utilization) == (None, None, None)
    assert notebook.cost == Decimal("1.00")  # its cost is known; only its idle part is not
    # The totals: of the measured line.
    assert (statement.totals["idle_hours"], statement.totals["idle_cost"]) == (Decimal("0.50"), Decimal("1.00"))
    rows_html = html.split("<tbody>")[1].split("</tbody>")[0].split("</tr>")
    assert "not measured" not in rows_html[0] and ">0.50<" in rows_html[0]
    assert rows_html[1].count(">not measured<") == 3  # idle GPU-hours, utilization, idle cost
    assert 'title="no Prometheus configured for this cluster"' in rows_html[1]
    header = rows[0]
    idle, idle_cost = header.index("Idle GPU-hours (empty: not measured)"), header.index("Idle cost (empty: not measured)")
    assert (rows[1][idle], rows[1][idle_cost]) == ("0.50", "1.00")
    assert (rows[2][idle], rows[2][idle_cost]) == ("", "")  # not measured: empty, not 0
    assert (rows[3][0], rows[3][idle]) == ("Total", "0.50")
    assert (api["lines"][0]["idle_hours"], api["lines"][1]["idle_hours"], api["lines"][1]["idle_cost"]) == (
        "0.50", None, None)
    assert api["totals"]["idle_hours"] == "0.50"
    assert api["idle_not_measured_reason"] == "no Prometheus configured for this cluster"


def test_a_statement_nothing_of_which_was_measured_says_so_in_its_totals(month, users, client):
    org = month  # March: closed without Prometheus
    client.force_login(users["sysadmin"])
    statement, html, rows, api = statement_of(client, f"/clusters/{org.cluster.pk}/statement/")
    assert all(line.idle_hours is None and line.idle_cost is None for line in statement.lines)
    assert statement.totals["idle_hours"] is None and statement.totals["idle_cost"] is None
    totals = html.split('id="statement-totals"')[1].split("</dl>")[0]
    assert 'data-total="idle_hours"><span class="not-measured" title="no Prometheus configured for this cluster">' \
           'not measured</span>' in totals
    footer = html.split("<tfoot>")[1].split("</tfoot>")[0]
    assert footer.count(">not measured<") == 3
    idle = rows[0].index("Idle GPU-hours (empty: not measured)")
    assert [r[idle] for r in rows[1:]] == [""] * len(rows[1:])
    assert api["totals"]["idle_hours"] is None and api["totals"]["idle_cost"] is None


def test_the_utilization_of_the_totals_is_called_the_gpu_hour_weighted_average_it_is(measured, users, client):
    org = measured
    # A third line measured too: ops-a's server on 1 V100 at 90 %, the next hour.
    run(org, "serve", org.ops_a, "v100-2", MAY + dt.timedelta(hours=1), MAY + dt.timedelta(hours=2))
    services.ledger_hour_close(cluster=org.cluster, hour=MAY + dt.timedelta(hours=1), utilization={
        ("runai-ops-a", "serve"): PodUtilization(utilization=90.0, idle_share=0.0)})
    client.force_login(users["sysadmin"])
    statement, html, rows, api = statement_of(client, f"/clusters/{org.cluster.pk}/statement/", month="2026-05")
    # Weighted by measured GPU-hours: (2 GPU-h × 40 % + 1 GPU-h × 90 %) / 3 GPU-h = 56.7 %, not (40 + 90) / 2.
    assert statement.totals["gpu_utilization"] == Decimal("56.7")
    assert "every total is the sum of the lines above it." not in html
    assert "except GPU utilization: an average, the lines' utilization weighted by their GPU-hours" in html
    footer = html.split("<tfoot>")[1].split("</tfoot>")[0]
    assert '56.7 <span class="hint">average, weighted by GPU-hours</span>' in footer
    assert '<dt title="The lines\' utilization weighted by their GPU-hours">Average GPU utilization</dt>' \
        '<dd data-total="gpu_utilization">56.7 %</dd>' in html
    column = rows[0].index("GPU utilization (%, average weighted by GPU-hours)")
    assert rows[-1][1] == "Total" and rows[-1][column] == "56.7"
    assert api["totals"]["gpu_utilization"] == "56.7"
