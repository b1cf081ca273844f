"""Audit filters take names (actor username, cluster, department, object name), never numeric ids, in
the page, the CSV and the API alike (one FilterSet)."""
import csv
import io
import re

import pytest

from audit.context import via
from nodepools import services as pool_services
from projects import services


@pytest.fixture
def trail(org, users):
    other = pool_services.cluster_create(actor=users["sysadmin"], name="prod")
    infra = services.department_create(actor=users["sysadmin"], cluster=other, name="infra")
    with via("page"):
        services.quota_update(actor=users["rnd_admin"], quota=org.quota(org.rnd_a, org.default), expected_version=1,
                              gpu_deserved="1.5")
    with via("api"):
        services.project_update(actor=users["sysadmin"], project=org.ops_a, description="ops work")
        services.department_update(actor=users["sysadmin"], department=infra, description="shared")
    return other, infra


def download(response):
    assert response.status_code == 200, response.content
    return list(csv.reader(io.StringIO(b"".join(response.streaming_content).decode())))


def objects_in_csv(response):
    return sorted({row[6] for row in download(response)[1:]})


def select_options(html, name):
    select = re.search(rf'<select name="{name}"[^>]*>(.*?)</select>', html, re.S)
    assert select, f"no dropdown {name}"
    return re.findall(r'<option value="([^"]*)"', select.group(1))


def test_the_page_offers_clusters_and_departments_by_name(client, users, org, trail):
    client.force_login(users["sysadmin"])
    html = client.get("/audit/").content.decode()
    assert select_options(html, "cluster") == ["", "lab", "prod"]
    assert select_options(html, "department") == ["", "infra", "ops", "rnd"]
    assert 'name="object_id"' not in html and 'name="actor"' in html and 'name="object"' in html
    for label in ("Actor (username)", "Cluster", "Department", "Object (name)", "Object type"):
        assert f"<label>{label} " in html


def test_filter_by_cluster_name_in_page_csv_and_api(client, api, users, org, trail):
    client.force_login(users["sysadmin"])
    page = client.get("/audit/", {"cluster": "prod"}).content.decode()
    assert "infra" in page and "rnd-a in default" not in page
    in_csv = objects_in_csv(client.get("/audit/export.csv", {"cluster": "prod"}))
    assert in_csv and all("rnd" not in o and "ops" not in o for o in in_csv)
    assert any("infra" in o for o in in_csv) and any("prod" in o for o in in_csv)
    body = api(users["sysadmin"]).get("/api/v1/audit-events/", {"cluster": "prod"}).json()
    assert sorted({e["object_repr"] for e in body["results"]}) == in_csv
    # An id is not a name: refused with the rule, never the whole trail.
    response = api(users["sysadmin"]).get("/api/v1/audit-events/", {"cluster": str(org.cluster.pk)})
    assert response.status_code == 400 and "cluster" in response.json()["errors"]
    response = client.get("/audit/export.csv", {"cluster": str(org.cluster.pk)})
    assert response.status_code == 400 and "Cluster: Select a valid choice" in response.content.decode()


def test_filter_by_actor_department_and_object_name(client, api, users, org, trail):
    client.force_login(users["sysadmin"])
    assert objects_in_csv(client.get("/audit/export.csv", {"actor": "rnd-admin"})) == ["rnd-a in default"]
    assert objects_in_csv(client.get("/audit/export.csv", {"department": "ops", "object_type": "project"})) == ["ops-a"]
    assert objects_in_csv(client.get("/audit/export.csv", {"object": "rnd-a in def"})) == ["rnd-a in default"]
    body = api(users["sysadmin"]).get("/api/v1/audit-events/", {"actor": "rnd-admin", "object": "rnd-a"}).json()
    assert [e["object_repr"] for e in body["results"]] == ["rnd-a in default"]


def test_a_department_admin_is_offered_only_its_departments(client, users, org, trail):
    client.force_login(users["rnd_admin"])
    html = client.get("/audit/").content.decode()
    assert "infra" not in select_options(html, "department") and "ops" not in select_options(html, "department")
    response = client.get("/audit/export.csv", {"department": "ops"})
    assert response.status_code == 400 and "ops" not in response.content.decode().split("\n")[0].split(":")[0]


def test_a_deleted_departments_events_are_still_found_by_its_name(client, users, org, trail):
    _, infra = trail
    services.department_delete(actor=users["sysadmin"], department=infra)
    client.force_login(users["sysadmin"])
    assert "infra" in objects_in_csv(client.get("/audit/export.csv", {"department": "infra", "action": "delete"}))[0]


@pytest.mark.django_db
def test_a_time_with_any_offset_filters_in_utc_and_never_fails(client, users):
    """An offset PostgreSQL cannot store (-22:04) and times near year 1 are answered, not a 500."""
    client.force_login(users["sysadmin"])
    ok = client.get("/api/v1/audit-events/", {"when_before": "0361-04-26T22:48:21-22:04",
                                              "when_after": "3743-12-28T14:23:36+11:20"})
    assert ok.status_code == 200
    edge = client.get("/api/v1/audit-events/", {"when_after": "0001-01-01T00:10:00+23:00"})
    assert edge.status_code == 400 and "when" in edge.content.decode()
