"""Quotas over the REST API: one entry per pool, versioned with ETag / If-Match so no edit is lost."""
import threading

import pytest

from audit.models import AuditEvent


def url(owner):
    kind = "projects" if hasattr(owner, "department_id") else "departments"
    return f"/api/v1/{kind}/{owner.pk}/quotas/"


def test_get_lists_one_entry_per_pool_with_usage_and_an_etag(api, org, users):
    org.run("train-1", org.rnd_a, "a100-1", gpus=2)
    response = api(users["rnd_viewer"]).get(url(org.rnd_a))
    assert response.status_code == 200 and response["ETag"].startswith('"')
    entries = response.json()["quotas"]
    assert [(e["pool_name"], e["gpu_deserved"], e["gpu_allocated"], e["gpu_over_quota"]) for e in entries] == [
        ("default", "0.000", "0.000", "0.000"), ("a100", "0.000", "2.000", "2.000")]
    assert entries[0]["owner_kind"] == "project" and entries[0]["rank_label"] == "Medium low"


def test_put_with_the_current_etag_saves_and_returns_a_new_etag(api, org, users):
    client = api(users["rnd_admin"])
    etag = client.get(url(org.rnd_a))["ETag"]
    response = client.put(url(org.rnd_a), {"quotas": [{"pool": org.a100.pk, "gpu_deserved": "1.5", "rank": 5}]},
                          format="json", HTTP_IF_MATCH=etag)
    assert response.status_code == 200, response.content
    assert response["ETag"] != etag
    a100 = next(e for e in response.json()["quotas"] if e["pool"] == org.a100.pk)
    assert (a100["gpu_deserved"], a100["rank"], a100["version"]) == ("1.500", 5, 2)
    # Over the department's own (zero) quota: saved, with the warning.
    assert any("Projects of rnd now have 1.5 GPUs deserved in a100, above the department's 0." == w for w in response.json()["warnings"])
    [event] = AuditEvent.objects.filter(object_type="quota", action="update")
    assert (event.via, event.actor_name, event.after["gpu_deserved"]) == ("api", "rnd-admin", "1.500")


def test_put_with_a_stale_etag_is_412_and_loses_nothing(api, org, users):
    alice, bob = api(users["rnd_admin"]), api(users["sysadmin"])
    etag = alice.get(url(org.rnd_a))["ETag"]
    assert bob.put(url(org.rnd_a), {"quotas": [{"pool": org.default.pk, "gpu_deserved": "2"}]}, format="json",
                   HTTP_IF_MATCH=bob.get(url(org.rnd_a))["ETag"]).status_code == 200
    response = alice.put(url(org.rnd_a), {"quotas": [{"pool": org.default.pk, "gpu_deserved": "3"}]}, format="json",
                         HTTP_IF_MATCH=etag)
    assert response.status_code == 412
    assert "changed since you read it" in response.json()["detail"]
    assert org.quota(org.rnd_a, org.default).gpu_deserved == 2


def test_put_without_if_match_is_428(api, org, users):
    response = api(users["rnd_admin"]).put(url(org.rnd_a), {"quotas": [{"pool": org.default.pk, "gpu_deserved": "3"}]},
                                           format="json")
    assert response.status_code == 428 and "If-Match" in response.json()["detail"]
    assert org.quota(org.rnd_a, org.default).gpu_deserved == 0


def test_invalid_values_are_400_naming_entry_field_and_rule_and_nothing_is_saved(api, org, users):
    client = api(users["rnd_admin"])
    etag = client.get(url(org.rnd_a))["ETag"]
    response = client.put(url(org.rnd_a), {"quotas": [
        {"pool": org.default.pk, "gpu_deserved": "1"},
        {"pool": org.a100.pk, "gpu_deserved": "4", "gpu_limit": "2"},
    ]}, format="json", HTTP_IF_MATCH=etag)
    assert response.status_code == 400
    errors = response.json()["errors"]["quotas"]
    assert errors[0] == {} and "cannot be lower than the deserved GPU quota" in errors[1]["gpu_limit"][0]
    # The first entry was valid but the request is all-or-nothing.
    assert org.quota(org.rnd_a, org.default).gpu_deserved == 0
    response = client.put(url(org.rnd_a), {"quotas": [{"pool": org.default.pk, "gpu_deserved": "-1"}]}, format="json",
                          HTTP_IF_MATCH=etag)
    assert response.status_code == 400 and "gpu_deserved" in response.json()["errors"]["quotas"][0]


def test_quota_below_non_preemptible_usage_is_refused(api, org, users):
    org.run("serve-1", org.rnd_a, "a100-1", gpus=2, priority=125)
    client = api(users["rnd_admin"])
    etag = client.get(url(org.rnd_a))["ETag"]
    response = client.put(url(org.rnd_a), {"quotas": [{"pool": org.a100.pk, "gpu_deserved": "1"}]}, format="json",
                          HTTP_IF_MATCH=etag)
    assert response.status_code == 400
    assert "already use 2 GPUs" in response.json()["errors"]["quotas"][0]["gpu_deserved"][0]


def test_pool_of_another_cluster_or_unknown_is_400(api, org, users):
    client = api(users["rnd_admin"])
    etag = client.get(url(org.rnd_a))["ETag"]
    response = client.put(url(org.rnd_a), {"quotas": [{"pool": 987654, "gpu_deserved": "1"}]}, format="json",
                          HTTP_IF_MATCH=etag)
    assert response.status_code == 400 and "987654" in response.json()["errors"]["quotas"][0]["pool"][0]


def test_roles_that_may_not_change_the_quota_get_403_before_any_precondition(api, org, users):
    for role, owner in (("rnd_viewer", org.rnd_a), ("researcher", org.rnd_a), ("proj_admin", org.rnd_a),
                        ("rnd_admin", org.rnd)):  # a department administrator does not set its own department's
        response = api(users[role]).put(url(owner), {"quotas": []}, format="json")
        assert response.status_code == 403, role


def test_system_admin_sets_a_department_quota(api, org, users):
    client = api(users["sysadmin"])
    etag = client.get(url(org.rnd))["ETag"]
    response = client.put(url(org.rnd), {"quotas": [{"pool": org.a100.pk, "gpu_deserved": "8", "cpu_deserved": None}]},
                          format="json", HTTP_IF_MATCH=etag)
    assert response.status_code == 200
    assert org.quota(org.rnd, org.a100).gpu_deserved == 8


def test_quota_list_filters_with_the_shared_filterset(api, org, users):
    rows = api(users["rnd_admin"]).get("/api/v1/quotas/", {"owner": "project", "pool": org.a100.pk}).json()["results"]
    assert sorted(r["project"] for r in rows) == sorted([org.rnd_a.pk, org.rnd_b.pk])


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_two_concurrent_puts_with_the_same_etag_one_wins_one_gets_412(org, users):
    """Two API clients, two database connections, the same If-Match: exactly one edit lands."""
    from django.db import connection
    from rest_framework.test import APIClient

    clients = [APIClient(), APIClient()]
    for client in clients:
        client.force_login(users["rnd_admin"])
    etag = clients[0].get(url(org.rnd_a))["ETag"]
    barrier = threading.Barrier(2)
    codes = []

    def put(client, value):
        try:
            barrier.wait()
            response = client.put(url(org.rnd_a), {"quotas": [{"pool": org.default.pk, "gpu_deserved": value}]},
                                  format="json", HTTP_IF_MATCH=etag)
            codes.append(response.status_code)
        finally:
            connection.close()

    threads = [threading.Thread(target=put, args=(c, v)) for c, v in zip(clients, ("1", "2"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(codes) == [200, 412]
    quota = org.quota(org.rnd_a, org.default)
    assert quota.version == 2 and quota.gpu_deserved in (1, 2)


def test_memory_in_gib_or_mib_over_the_api(api, org, users):
    client = api(users["sysadmin"])
    etag = client.get(url(org.rnd_a))["ETag"]
    response = client.put(url(org.rnd_a), {"quotas": [{"pool": org.a100.pk, "memory_deserved_gib": "1.5",
                                                       "memory_limit_mib": 4096}]}, format="json", HTTP_IF_MATCH=etag)
    assert response.status_code == 200, response.content
    a100 = next(e for e in response.json()["quotas"] if e["pool"] == org.a100.pk)
    # Stored and returned in MiB as before, and in GiB as the pages say it.
    assert (a100["memory_deserved_mib"], a100["memory_deserved_gib"]) == (1536, "1.5")
    assert (a100["memory_limit_mib"], a100["memory_limit_gib"]) == (4096, "4")
    etag = response["ETag"]
    response = client.put(url(org.rnd_a), {"quotas": [{"pool": org.a100.pk, "memory_deserved_gib": "2",
                                                       "memory_deserved_mib": 2048}]}, format="json", HTTP_IF_MATCH=etag)
    assert response.status_code == 400
    assert response.json()["errors"]["quotas"][0]["memory_deserved_gib"] == [
        "Send memory in GiB (memory_deserved_gib) or in MiB (memory_deserved_mib), not both."]
    assert org.quota(org.rnd_a, org.a100).memory_deserved_mib == 1536


@pytest.mark.parametrize("entry, field, said", [
    ({"gpu_deserved": "99999999999"}, "gpu_deserved", "Enter at most 1,000,000 GPUs."),
    ({"gpu_deserved": "0.1255"}, "gpu_deserved", "Enter at most 3 decimal places."),
    ({"gpu_deserved": "-1"}, "gpu_deserved", "Cannot be negative: enter 0 or more."),
    ({"memory_deserved_mib": 99999999999999999999}, "memory_deserved_mib", "Enter at most 1,024,000,000,000 MiB."),
    ({"pool": 99999999999999999999}, "pool", "Enter a smaller number: this one is larger than the console can store."),
    ({"memory_deserved_gib": "2000000000"}, "memory_deserved_gib", "Enter at most 1,000,000,000 GiB."),
    ({"over_quota_weight": 99999999999}, "over_quota_weight", "Enter at most 1,000,000."),
])
def test_api_limits_are_said_as_amounts_naming_the_field(api, org, users, entry, field, said):
    client = api(users["sysadmin"])
    etag = client.get(url(org.rnd_a))["ETag"]
    response = client.put(url(org.rnd_a), {"quotas": [{"pool": org.a100.pk, **entry}]}, format="json",
                          HTTP_IF_MATCH=etag)
    assert response.status_code == 400
    body = response.json()
    assert body["errors"]["quotas"][0][field] == [said]
    assert field in body["detail"] and "digits" not in body["detail"]
    assert org.quota(org.rnd_a, org.a100).version == 1
