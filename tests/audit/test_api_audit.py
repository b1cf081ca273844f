"""The audit trail over the API: scoped like the pages; API writes are recorded as made through the API."""
import csv
import io

from audit.models import AuditEvent


def test_api_writes_are_recorded_as_api(api, org, users):
    client = api(users["sysadmin"])
    client.patch(f"/api/v1/projects/{org.rnd_a.pk}/", {"description": "from a script"}, format="json")
    client.patch(f"/api/v1/clusters/{org.cluster.pk}/", {"description": "lab cluster"}, format="json")
    client.post("/api/v1/departments/", {"cluster": org.cluster.pk, "name": "infra"}, format="json")
    events = AuditEvent.objects.filter(actor_name="sysadmin").order_by("pk")
    assert [(e.object_type, e.action, e.via) for e in events] == [
        ("project", "update", "api"), ("cluster", "update", "api"), ("department", "create", "api")]


def test_token_authenticated_writes_are_recorded_as_api_too(client, org, users):
    from accounts.services import token_create

    _, raw = token_create(actor=users["rnd_admin"], name="ci")
    response = client.patch(f"/api/v1/projects/{org.rnd_b.pk}/", {"description": "x"}, content_type="application/json",
                            HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert response.status_code == 200
    event = AuditEvent.objects.get(object_type="project", action="update")
    assert (event.actor_name, event.via) == ("rnd-admin", "api")


def test_department_admin_reads_its_departments_events(api, org, users):
    api(users["sysadmin"]).patch(f"/api/v1/projects/{org.ops_a.pk}/", {"description": "ops"}, format="json")
    api(users["sysadmin"]).patch(f"/api/v1/projects/{org.rnd_a.pk}/", {"description": "rnd"}, format="json")
    rows = api(users["rnd_admin"]).get("/api/v1/audit-events/", {"object_type": "project", "action": "update"}).json()["results"]
    assert [r["object_repr"] for r in rows] == ["rnd-a"]
    other = AuditEvent.objects.get(object_repr="ops-a", action="update")
    assert api(users["rnd_admin"]).get(f"/api/v1/audit-events/{other.pk}/").status_code == 404
    assert api(users["researcher"]).get("/api/v1/audit-events/").json()["results"] == []


def test_the_trail_cannot_be_changed_through_the_api(api, org, users):
    event = AuditEvent.objects.first()
    client = api(users["sysadmin"])
    assert client.delete(f"/api/v1/audit-events/{event.pk}/").status_code == 405
    assert client.patch(f"/api/v1/audit-events/{event.pk}/", {"actor": "x"}, format="json").status_code == 405
    assert client.post("/api/v1/audit-events/", {}, format="json").status_code == 405


def test_audit_csv_over_the_api_streams_filtered_rows(api, org, users):
    response = api(users["sysadmin"]).get("/api/v1/audit-events/export/", {"object_type": "department"})
    rows = list(csv.reader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert rows[0][0] == "When (UTC)" and {r[4] for r in rows[1:]} == {"department"} and len(rows) == 3
