"""Clusters, node pools and nodes over the REST API: what each role reads and may change."""
import pytest

from audit.models import AuditEvent


def names(response):
    assert response.status_code == 200, response.content
    return [row["name"] for row in response.json()["results"]]


def test_pools_list_with_capacity_and_allocation(api, org, users):
    org.run("train-1", org.rnd_a, "a100-1", gpus=3)
    response = api(users["rnd_viewer"]).get("/api/v1/node-pools/")
    pools = {row["name"]: row for row in response.json()["results"]}
    assert list(pools) == ["default", "a100"]
    # GPU figures are GPU-equivalents (decimals, as allocated always was); gpu_devices the physical GPUs.
    assert (pools["a100"]["status"], pools["a100"]["gpu_devices"], pools["a100"]["gpu_total"], pools["a100"]["gpu_ready"],
            pools["a100"]["gpu_allocated"], pools["a100"]["gpu_allocated_not_ready"], pools["a100"]["gpu_free"]) == (
        "Ready", 8, "8.000", "8.000", "3.000", "0.000", "5.000")
    assert pools["a100"]["label"] == "gpu-type=A100" and pools["a100"]["node_count"] == 2


def test_pools_filter_and_order_through_the_shared_filterset(api, org, users):
    client = api(users["sysadmin"])
    assert names(client.get("/api/v1/node-pools/", {"q": "a10"})) == ["a100"]
    assert names(client.get("/api/v1/node-pools/", {"ordering": "-name"})) == ["default", "a100"]
    assert names(client.get("/api/v1/nodes/", {"pool": org.a100.pk})) == ["a100-1", "a100-2"]
    assert names(client.get("/api/v1/nodes/", {"status": "ready", "q": "v100-2"})) == ["v100-2"]


def test_pagination(api, org, users):
    body = api(users["sysadmin"]).get("/api/v1/nodes/", {"page_size": 3}).json()
    assert body["count"] == 4 and len(body["results"]) == 3 and body["next"]


def test_system_admin_creates_changes_and_deletes_a_pool_recorded_as_api(api, org, users):
    client = api(users["sysadmin"])
    response = client.post("/api/v1/node-pools/", {"cluster": org.cluster.pk, "name": "h100", "label_key": "gpu-type",
                                                   "label_value": "H100"}, format="json")
    assert response.status_code == 201, response.content
    pk = response.json()["id"]
    assert response.json()["status"] == "Empty"
    response = client.patch(f"/api/v1/node-pools/{pk}/", {"gpu_placement": "spread"}, format="json")
    assert response.status_code == 200 and response.json()["gpu_placement"] == "spread"
    assert client.delete(f"/api/v1/node-pools/{pk}/").status_code == 204
    events = AuditEvent.objects.filter(object_type="nodepool", object_id=str(pk)).order_by("pk")
    assert [(e.action, e.via, e.actor_name) for e in events] == [
        ("create", "api", "sysadmin"), ("update", "api", "sysadmin"), ("delete", "api", "sysadmin")]


def test_invalid_label_names_the_field_and_the_kubernetes_rule(api, org, users):
    response = api(users["sysadmin"]).post(
        "/api/v1/node-pools/", {"cluster": org.cluster.pk, "name": "bad", "label_key": "gpu type", "label_value": "x"},
        format="json")
    assert response.status_code == 400
    body = response.json()
    assert "label_key" in body["errors"] and "(“gpu type” holds a space)." in body["errors"]["label_key"][0]
    assert "regex" not in body["detail"]
    assert body["detail"].startswith("Invalid input: label_key:")


def test_the_default_pool_cannot_be_deleted_or_renamed(api, org, users):
    client = api(users["sysadmin"])
    response = client.delete(f"/api/v1/node-pools/{org.default.pk}/")
    assert response.status_code == 400 and response.json()["errors"]
    response = client.patch(f"/api/v1/node-pools/{org.default.pk}/", {"name": "other"}, format="json")
    assert response.status_code == 400 and "name" in response.json()["errors"]


@pytest.mark.parametrize("role", ["rnd_admin", "rnd_viewer", "proj_admin", "researcher", "cluster_viewer"])
def test_only_system_admins_write_pools_and_clusters(api, org, users, role):
    client = api(users[role])
    assert client.get(f"/api/v1/node-pools/{org.a100.pk}/").status_code == 200
    assert client.patch(f"/api/v1/node-pools/{org.a100.pk}/", {"description": "x"}, format="json").status_code == 403
    assert client.delete(f"/api/v1/node-pools/{org.a100.pk}/").status_code == 403
    assert client.post("/api/v1/clusters/", {"name": "new"}, format="json").status_code == 403
    body = client.patch(f"/api/v1/clusters/{org.cluster.pk}/", {"description": "x"}, format="json").json()
    assert body["detail"] == "Only system administrators may change clusters."


def test_users_without_a_role_in_the_cluster_see_nothing_and_get_404_by_id(api, org, users):
    client = api(users["nobody"])
    assert names(client.get("/api/v1/node-pools/")) == []
    assert client.get(f"/api/v1/node-pools/{org.a100.pk}/").status_code == 404
    assert client.get(f"/api/v1/clusters/{org.cluster.pk}/").status_code == 404
    node = org.cluster.nodes.first()
    assert client.get(f"/api/v1/nodes/{node.pk}/").status_code == 404


def test_cluster_credentials_location_is_shown_to_system_admins_only(api, org, users):
    from nodepools import services

    services.cluster_update(actor=None, cluster=org.cluster, kubeconfig_path="/etc/console/lab.yaml")
    admin = api(users["sysadmin"]).get(f"/api/v1/clusters/{org.cluster.pk}/").json()
    viewer = api(users["cluster_viewer"]).get(f"/api/v1/clusters/{org.cluster.pk}/").json()
    assert (admin["kubeconfig_path"], viewer["kubeconfig_path"]) == ("/etc/console/lab.yaml", "")


def test_anonymous_requests_get_401_json(api, org):
    response = api().get("/api/v1/node-pools/")
    assert response.status_code == 401
    assert response.json()["detail"] == "Authentication credentials were not provided."


def test_filter_with_an_id_the_user_may_not_see_is_a_400_naming_the_field(api, org, users, db):
    from nodepools import services

    other = services.cluster_create(actor=None, name="other")
    response = api(users["rnd_admin"]).get("/api/v1/node-pools/", {"cluster": other.pk})
    assert response.status_code == 400 and "cluster" in response.json()["errors"]


def test_moving_a_node_is_for_system_admins(api, org, users):
    node = org.cluster.nodes.get(name="v100-1")
    for role in ("rnd_admin", "cluster_viewer"):
        response = api(users[role]).post(f"/api/v1/nodes/{node.pk}/move/", {"pool": org.a100.pk}, format="json")
        assert response.status_code == 403 and "move nodes" in response.json()["detail"]


def test_moving_a_node_to_a_pool_of_another_cluster_is_400(api, org, users):
    from nodepools import services

    other = services.pool_create(actor=None, cluster=services.cluster_create(actor=None, name="other"), name="t4",
                                 label_key="gpu-type", label_value="T4")
    node = org.cluster.nodes.get(name="v100-1")
    response = api(users["sysadmin"]).post(f"/api/v1/nodes/{node.pk}/move", {"pool": other.pk}, format="json")
    assert response.status_code == 400 and "another cluster" in response.json()["errors"]["pool"][0]


def test_a_move_the_cluster_cannot_take_is_400_and_changes_nothing(api, org, users):
    # The fixture cluster has no kubeconfig: the patch cannot be sent.
    node = org.cluster.nodes.get(name="v100-1")
    response = api(users["sysadmin"]).post(f"/api/v1/nodes/{node.pk}/move/", {"pool": org.a100.pk}, format="json")
    assert response.status_code == 400
    assert response.json()["errors"]["pool"][0].startswith("Could not move node 'v100-1' to pool 'a100'")
    node.refresh_from_db()
    assert node.pool == org.default and not AuditEvent.objects.filter(action="move").exists()


def test_routes_answer_without_the_trailing_slash(api, org, users):
    client = api(users["sysadmin"])
    assert client.get("/api/v1/node-pools").status_code == 200
    assert client.get(f"/api/v1/projects/{org.rnd_a.pk}/quotas").status_code == 200
