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
    html = client.get("/audit/", HTTP_HX_REQUEST="true").content.decode()
    assert 'id="audit-table"' in html and "<html" not in html


def test_invalid_filter_is_reported_not_a_500(client, users, trail):
    client.force_login(users["sysadmin"])
    response = client.get("/audit/", {"when_after": "yesterday-ish"})
    assert response.status_code == 200 and "Enter a valid date/time" in response.content.decode()
