"""The audit trail pages: who may read what, filters, one event's values, and the CSV download."""
import csv
import io

import pytest

from audit.context import via
from projects import services


@pytest.fixture
def trail(org, users):
    with via("page"):
        services.quota_update(actor=users["rnd_admin"], quota=org.quota(org.rnd_a, org.default), expected_version=1,
                              gpu_deserved="1.5")
    with via("api"):
        services.quota_update(actor=users["sysadmin"], quota=org.quota(org.ops_a, org.default), expected_version=1,
                              gpu_deserved="2")
        services.project_update(actor=users["sysadmin"], project=org.ops_a, description="=HYPERLINK(\"http://evil\")")


def download(response):
    assert response.status_code == 200 and response["Content-Type"].startswith("text/csv")
    return list(csv.reader(io.StringIO(b"".join(response.streaming_content).decode())))


def test_system_admin_sees_every_event_and_filters_them(client, users, trail):
    client.force_login(users["sysadmin"])
    page = client.get("/audit/").content.decode()
    assert "rnd-a in default" in page and "ops-a in default" in page
    page = client.get("/audit/", {"via": "api", "object_type": "quota"}).content.decode()
    assert "ops-a in default" in page and "rnd-a in default" not in page


def test_department_admin_sees_its_departments_events_only(client, users, trail, org):
    client.force_login(users["rnd_admin"])
    page = client.get("/audit/").content.decode()
    assert "rnd-a in default" in page and "ops-a" not in page
    rows = download(client.get("/audit/export.csv"))
    assert rows[0][:4] == ["When (UTC)", "Actor", "Through", "Action"]
    assert {row[6] for row in rows[1:]} >= {"rnd-a in default"} and not any("ops-a" in row[6] for row in rows[1:])


def test_another_departments_event_by_id_is_404(client, users, trail):
    from audit.models import AuditEvent

    other = AuditEvent.objects.filter(object_repr="ops-a in default").get()
    client.force_login(users["rnd_admin"])
    assert client.get(f"/audit/{other.pk}/").status_code == 404
    client.force_login(users["sysadmin"])
    page = client.get(f"/audit/{other.pk}/").content.decode()
    assert "gpu_deserved" in page and "2.00" in page and "sysadmin" in page


@pytest.mark.parametrize("role", ["rnd_viewer", "proj_admin", "researcher", "cluster_viewer", "nobody"])
def test_other_roles_may_not_read_the_trail(client, users, trail, role):
    client.force_login(users[role])
    assert client.get("/audit/").status_code == 403
    assert client.get("/audit/export.csv").status_code == 403


def test_csv_cells_are_escaped_against_formula_injection(client, users, trail):
    client.force_login(users["sysadmin"])
    rows = download(client.get("/audit/export.csv", {"object_type": "project"}))
    [event] = [row for row in rows[1:] if row[3] == "update"]
    # The after-values are JSON starting with '{', so the injected text sits inside; the cell itself is safe.
    assert '=HYPERLINK' in event[10] and not event[10].startswith("=")


def test_csv_follows_the_filters(client, users, trail):
    client.force_login(users["sysadmin"])
    rows = download(client.get("/audit/export.csv", {"via": "page"}))
    assert [row[2] for row in rows[1:]] == ["page"]


def test_htmx_request_gets_the_table_fragment_only(client, users, trail):
    client.force_login(users["sysadmin"])
    # Like every table page: the htmx request that targets the table gets the table partial only.
    html = client.get("/audit/", HTTP_HX_REQUEST="true", HTTP_HX_TARGET="table").content.decode()
    assert 'id="table"' in html and 'id="audit-table"' in html and "<html" not in html


def test_invalid_filter_is_reported_not_a_500(client, users, trail):
    client.force_login(users["sysadmin"])
    response = client.get("/audit/", {"when_after": "yesterday-ish"})
    assert response.status_code == 200 and "Enter a valid date/time" in response.content.decode()


# --- Columns chosen per user, and the page's CSV following them -------------------------------------

def test_audit_columns_are_chosen_ordered_and_remembered(client, users, trail):
    from django.urls import reverse

    from tests.pages import headers, login

    login(client, users, "sysadmin")
    assert headers(client.get("/audit/")) == ["When (UTC)", "Actor", "Through", "Action", "Object type", "Object",
                                              "Changed fields"]
    chooser = client.get("/audit/").content.decode()
    assert reverse("table-columns", args=["audit"]) in chooser and 'value="department_id"' in chooser
    client.post(reverse("table-columns", args=["audit"]),
                {"order": ["object_repr", "action", "actor_name", "after"], "columns": ["object_repr", "action", "after"]})
    assert headers(client.get("/audit/")) == ["Object", "Action", "After"]
    client.post(reverse("table-columns", args=["audit"]),
                {"order": ["object_repr", "action", "after"], "columns": ["object_repr", "action", "after"],
                 "move": "up:after"})
    assert headers(client.get("/audit/", {"via": "page"})) == ["Object", "After", "Action"]
    # Another administrator keeps the defaults.
    login(client, users, "rnd_admin")
    assert headers(client.get("/audit/"))[:2] == ["When (UTC)", "Actor"]


def test_audit_page_csv_holds_the_chosen_columns_in_order_with_filters_and_sort(client, users, trail):
    from tests.pages import csv_of, login
    from ui import services
    from audit.tables import AuditEventTable

    login(client, users, "sysadmin")
    services.table_preference_set(user=users["sysadmin"], table="audit", columns=["object_repr", "action", "actor_name"],
                                  allowed=AuditEventTable.column_names())
    rows = csv_of(client.get("/audit/", {"object_type": "quota", "sort": "object_repr", "format": "csv"}))
    assert rows == [["Object", "Action", "Actor"], ["ops-a in default", "Update", "sysadmin"],
                    ["rnd-a in default", "Update", "rnd-admin"]]
    # The CSV of every column: each field of the event, values as JSON, formula cells escaped.
    rows = csv_of(client.get("/audit/", {"object_type": "project", "format": "csv", "columns": "all"}))
    assert rows[0] == ["When (UTC)", "Actor", "Through", "Action", "Object type", "Object id", "Object", "Cluster id",
                       "Department id", "Before", "After", "Changed fields"]
    [update] = [row for row in rows[1:] if row[3] == "Update"]
    assert update[1:3] == ["sysadmin", "api"] and update[11] == "description"
    assert '"description": "=HYPERLINK' in update[10] and not update[10].startswith("=")


def test_department_admin_csv_of_the_page_holds_its_events_only(client, users, trail):
    from tests.pages import csv_of, login

    login(client, users, "rnd_admin")
    rows = csv_of(client.get("/audit/", {"format": "csv"}))
    objects = [row[5] for row in rows[1:]]
    assert "rnd-a in default" in objects and not any("ops-a" in o for o in objects)


# --- The navigation shows "Audit" only to those who may read it -------------------------------------

@pytest.mark.parametrize("role, shown", [("sysadmin", True), ("rnd_admin", True), ("rnd_viewer", False),
                                         ("proj_admin", False), ("researcher", False), ("cluster_viewer", False),
                                         ("nobody", False)])
def test_audit_link_in_the_navigation_follows_the_access_rules(client, users, org, role, shown):
    import re

    client.force_login(users[role])
    page = client.get("/nodes/").content.decode()
    nav = re.search(r'<nav class="mainnav"[^>]*>.*?</nav>', page, re.S).group(0)
    assert ('href="/audit/"' in nav) is shown
    assert client.get("/audit/").status_code == (200 if shown else 403)
