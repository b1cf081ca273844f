"""/api/v1/platforms, /pod-templates, /rule-sets: the same rows as the pages (restrict + FilterSet),
writes by system administrators through the services, bad input a 400 naming the field."""
from __future__ import annotations

import pytest

from workloads.models import Platform, PodTemplate

pytestmark = pytest.mark.django_db

SEERS = {"sysadmin", "rnd_admin", "rnd_viewer", "proj_admin", "researcher", "cluster_viewer"}


@pytest.mark.parametrize("role", ["sysadmin", "researcher", "nobody"])
def test_platform_list_per_role(api, hetero, users, role):
    response = api(users[role]).get("/api/v1/platforms/")
    assert response.status_code == 200
    names = [row["name"] for row in response.json()["results"]]
    assert sorted(names) == (["a100-platform", "l40s-platform"] if role in SEERS else [])
    if names:
        a100 = next(row for row in response.json()["results"] if row["name"] == "a100-platform")
        assert a100["override_templates"] == ["a100"] and a100["rule_sets"] == ["default_gpu"]
        assert a100["tolerations"][0]["value"] == "NVIDIA-A100" and a100["is_default"] is False


def test_create_platform_through_the_api(api, hetero, users):
    client = api(users["sysadmin"])
    response = client.post("/api/v1/platforms/", {
        "pool": hetero.pool.pk, "name": "a100-all", "node_selector": {"nvidia.com/gpu.product": "NVIDIA-A100"},
        "tolerations": [{"operator": "Exists"}], "override_templates": ["a100"], "make_default": True}, format="json")
    assert response.status_code == 201, response.json()
    assert response.json()["is_default"] is True
    bad = client.post("/api/v1/platforms/", {"pool": hetero.pool.pk, "name": "broken",
                                            "tolerations": [{"key": "a", "operator": "Sometimes"}]}, format="json")
    assert bad.status_code == 400
    assert bad.json()["detail"].startswith("Invalid input: tolerations: tolerations[0].operator: Unsupported value")
    assert not Platform.objects.filter(name="broken").exists()
    denied = api(users["researcher"]).post("/api/v1/platforms/", {"pool": hetero.pool.pk, "name": "mine"}, format="json")
    assert denied.status_code == 403 and not Platform.objects.filter(name="mine").exists()


def test_pod_template_api_takes_yaml_and_detects_stale_writes(api, hetero, users):
    client = api(users["sysadmin"])
    created = client.post("/api/v1/pod-templates/", {
        "cluster": hetero.org.cluster.pk, "name": "h100",
        "body": "spec:\n  nodeSelector:\n    nvidia.com/gpu.product: NVIDIA-H100\n"}, format="json")
    assert created.status_code == 201, created.json()
    assert created.json()["body"] == {"spec": {"nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H100"}}}
    url = f"/api/v1/pod-templates/{created.json()['id']}/"
    assert client.patch(url, {"description": "H100", "version": 1}, format="json").status_code == 200
    stale = client.patch(url, {"description": "again", "version": 1}, format="json")
    assert stale.status_code == 409 and "changed by someone else meanwhile" in stale.json()["detail"]
    malformed = client.post("/api/v1/pod-templates/", {"cluster": hetero.org.cluster.pk, "name": "bad",
                                                      "body": {"spec": {"containers": "main"}}}, format="json")
    assert malformed.status_code == 400
    assert malformed.json()["errors"]["body"] == ["spec.containers: must be a list."]
    assert not PodTemplate.objects.filter(name="bad").exists()
    in_use = client.delete(f"/api/v1/pod-templates/{hetero.a100.pk}/")
    assert in_use.status_code == 400 and "used by platform 'a100-platform'" in in_use.json()["detail"]


def test_rule_set_api_names_the_bad_rule(api, hetero, users):
    client = api(users["sysadmin"])
    response = client.post("/api/v1/rule-sets/", {"cluster": hetero.org.cluster.pk, "name": "x", "rules": [
        {"operator": "LE", "left_operand": "{{USER_GPU}}", "right_operand": "{{K8_GPUS}}"}]}, format="json")
    assert response.status_code == 400
    assert response.json()["errors"]["rules"] == [
        "rules[0].right_operand: unknown variable 'K8_GPUS': rules compare USER_CPU, USER_GPU, USER_MEMORY, "
        "USER_STORAGE, K8_CPU, K8_MEMORY, K8_GPU, K8_STORAGE."]
    names = [row["name"] for row in api(users["researcher"]).get("/api/v1/rule-sets/").json()["results"]]
    assert {"default_cpu", "default_gpu", "default_memory", "default_storage"} <= set(names)
