"""Pages of clusters, node pools and nodes: what each role sees, may do, and is refused."""
import re

import pytest
from django.urls import reverse

from nodepools.models import Node, NodePool
from nodepools.tables import NodeTable
from tests.pages import ROLES, first_column, headers, htmx, login, page_text, table_rows, text

SEEING = ["sysadmin", "rnd_admin", "rnd_viewer", "proj_admin", "researcher", "cluster_viewer"]


@pytest.fixture
def other(db):
    from nodepools import services

    cluster = services.cluster_create(actor=None, name="other")
    services.pool_create(actor=None, cluster=cluster, name="t4", label_key="gpu-type", label_value="T4")
    return cluster


# --- Log in, log out, landing ------------------------------------------------------------------------

def test_anonymous_users_are_sent_to_log_in(client, db):
    for url in [reverse("home"), reverse("pool-list"), reverse("node-list"), reverse("department-list")]:
        response = client.get(url)
        assert response.status_code == 302 and response.url.startswith(reverse("login")), url


def test_login_then_overview_lists_pools_with_gpu_numbers(client, org, users):
    org.run("train-1", org.rnd_a, "a100-1", gpus=3)
    response = client.post(reverse("login"), {"username": "sysadmin", "password": "pw-sysadmin"}, follow=True)
    assert response.status_code == 200
    assert table_rows(response) == [
        # pool, status, label, nodes, GPUs total, ready, allocated, free, what fits now (pods × GPUs each)
        ["default", "Ready", "—", "2", "8", "8", "0", "8", "8 GPUs free: 0×8 · 2×4 · 4×2 · 8×1"],
        ["a100", "Ready", "gpu-type=A100", "2", "8", "8", "3", "5", "5 GPUs free: 0×8 · 1×4 · 2×2 · 5×1"],
    ]
    assert "Cluster lab" in text(response.content.decode())


def test_wrong_password_is_refused(client, users):
    response = client.post(reverse("login"), {"username": "sysadmin", "password": "nope"})
    assert response.status_code == 200 and b"didn't match" in response.content


def test_user_without_roles_sees_no_pools(client, users):
    login(client, users, "nobody")
    response = client.get(reverse("home"))
    assert b"No node pools you may see yet" in response.content and table_rows(response) == []


@pytest.mark.parametrize("role", ["rnd_admin", "rnd_viewer"])
def test_department_managers_land_on_their_department(client, org, users, role):
    login(client, users, role)
    response = client.get(reverse("home"))
    assert response.status_code == 302 and response.url == reverse("department-detail", args=[org.rnd.pk])


@pytest.mark.parametrize("role", ["cluster_viewer"])
def test_other_scoped_roles_land_on_their_clusters_overview(client, users, other, role):
    # Roles in projects only land on their projects instead (tests/projects/test_landing.py).
    login(client, users, role)
    response = client.get(reverse("home"))
    assert first_column(response) == ["default", "a100"]


def test_logout(client, users):
    login(client, users, "sysadmin")
    response = client.post(reverse("logout"))
    assert response.status_code == 302
    assert client.get(reverse("home")).status_code == 302


# --- Overview and the cluster switcher -------------------------------------------------------------

def test_cluster_switcher_lists_only_visible_clusters_and_remembers_the_choice(client, org, users, other):
    login(client, users, "sysadmin")
    page = client.get(reverse("home")).content.decode()
    assert '<option value="%d"' % other.pk in page and '<option value="%d"' % org.cluster.pk in page
    response = client.get(reverse("cluster-switch"), {"cluster": other.pk})
    assert response.url == reverse("cluster-overview", args=[other.pk])
    assert first_column(client.get(reverse("home"))) == ["default", "t4"]
    # The quota link of the navigation follows the current cluster.
    assert reverse("quota-grid", args=[other.pk]) in client.get(reverse("home")).content.decode()


def test_cluster_switcher_refuses_a_cluster_the_user_may_not_see(client, users, other):
    login(client, users, "rnd_viewer")
    assert f'<option value="{other.pk}"'.encode() not in client.get(reverse("pool-list")).content
    assert client.get(reverse("cluster-switch"), {"cluster": other.pk}).status_code == 404
    assert client.get(reverse("cluster-switch"), {"cluster": "x"}).status_code == 404


@pytest.mark.parametrize("role", ROLES)
def test_overview_page_per_role(client, org, users, role):
    login(client, users, role)
    response = client.get(reverse("cluster-overview", args=[org.cluster.pk]))
    if role == "nobody":
        assert response.status_code == 404
        return
    assert response.status_code == 200
    assert first_column(response) == ["default", "a100"]


def test_overview_chart_shows_deserved_allocated_and_over_quota_per_department_and_pool(client, org, users):
    from projects import services

    services.quota_update(actor=None, quota=org.quota(org.rnd, org.a100), expected_version=None, gpu_deserved=2)
    org.run("train-1", org.rnd_a, "a100-1", gpus=3)
    login(client, users, "sysadmin")
    page = client.get(reverse("cluster-overview", args=[org.cluster.pk])).content.decode()
    # The figures as a table beside the chart (tests/test_charts.py checks its JSON for the browser).
    assert re.search(r'<th scope="row">a100 · rnd</th><td class="num">2</td><td class="num">3</td><td class="num">1</td>', page)


def test_overview_chart_shows_only_the_users_departments(client, org, users):
    login(client, users, "rnd_viewer")
    page = client.get(reverse("cluster-overview", args=[org.cluster.pk])).content.decode()
    assert "a100 · rnd" in page and "· ops" not in page


def test_overview_htmx_refresh_returns_only_the_table_partial(client, org, users):
    login(client, users, "sysadmin")
    response = htmx(client, reverse("cluster-overview", args=[org.cluster.pk]))
    html = response.content.decode()
    assert html.lstrip().startswith('<div id="table"') and "<html" not in html
    assert first_column(response) == ["default", "a100"]


# --- Node pools -------------------------------------------------------------------------------------

def test_pools_table_has_the_reference_columns(client, org, users):
    login(client, users, "sysadmin")
    from nodepools.tables import NodePoolTable

    labels = [NodePoolTable.column_label(n) for n in NodePoolTable.column_names()]
    for column in ["Node pool", "Status", "Label key", "Label value", "Nodes", "GPU placement strategy",
                   "CPU placement strategy", "Total GPU devices", "Total GPU memory (GiB)", "Allocated GPUs",
                   "Total CPU (cores)", "Total CPU memory (GiB)", "Allocated CPU (cores)",
                   "Allocated CPU memory (GiB)", "Projects' GPU quota (sum)", "Workloads", "Last updated",
                   "Creation time"]:
        assert column in labels


def test_pools_table_numbers(client, org, users):
    from projects import services

    services.quota_update(actor=None, quota=org.quota(org.rnd_a, org.a100), expected_version=None, gpu_deserved=1.5)
    services.quota_update(actor=None, quota=org.quota(org.ops_a, org.a100), expected_version=None, gpu_deserved=1)
    org.run("train-1", org.rnd_a, "a100-1", gpus=3)
    login(client, users, "sysadmin")
    response = client.get(reverse("pool-list"), {"sort": "name"})
    assert headers(response)[:6] == ["Node pool", "Cluster", "Status", "Label key", "Label value", "Nodes"]
    assert table_rows(response) == [
        # pool, cluster, status, key, value, nodes, GPUs total, allocated, free, utilization of allocated GPUs,
        # idle allocated GPUs (no Prometheus: "—"), projects' quota, workloads, placement
        ["a100", "lab", "Ready", "gpu-type", "A100", "2", "8", "3", "5", "—", "—", "2.5", "1", "Bin-pack"],
        ["default", "lab", "Ready", "", "", "2", "8", "0", "8", "—", "—", "0", "0", "Bin-pack"],
    ]


@pytest.mark.parametrize("role", ROLES)
def test_pool_list_per_role(client, org, users, other, role):
    login(client, users, role)
    response = client.get(reverse("pool-list"), {"sort": "name"})
    assert response.status_code == 200
    expected = {"sysadmin": ["a100", "default", "default", "t4"], "nobody": []}.get(role, ["a100", "default"])
    assert first_column(response) == expected
    assert (b"Add node pool" in response.content) == (role == "sysadmin")


def test_pool_list_filters_and_searches(client, org, users, other):
    login(client, users, "sysadmin")
    assert first_column(client.get(reverse("pool-list"), {"cluster": other.pk, "sort": "name"})) == ["default", "t4"]
    assert first_column(client.get(reverse("pool-list"), {"q": "A100"})) == ["a100"]


@pytest.mark.parametrize("role", ROLES)
def test_pool_page_per_role(client, org, users, role):
    login(client, users, role)
    response = client.get(reverse("pool-detail", args=[org.a100.pk]))
    if role == "nobody":
        assert response.status_code == 404
        return
    assert response.status_code == 200
    assert first_column(response) == ["a100-1", "a100-2"]  # its nodes
    assert (b"Delete" in response.content) == (role == "sysadmin")


def test_pool_page_shows_quotas_of_departments_and_projects_the_user_may_see(client, org, users):
    login(client, users, "rnd_viewer")
    rows = table_rows(client.get(reverse("pool-detail", args=[org.a100.pk])), "pool-quotas")
    assert [r[0] for r in rows] == ["rnd", "rnd-a (rnd)", "rnd-b (rnd)"]
    login(client, users, "sysadmin")
    rows = table_rows(client.get(reverse("pool-detail", args=[org.a100.pk])), "pool-quotas")
    assert [r[0] for r in rows] == ["ops", "rnd", "ops-a (ops)", "rnd-a (rnd)", "rnd-b (rnd)"]


def test_pool_page_names_label_conflicts(client, org, users):
    from nodepools import services
    from kubesim import make_node

    services.pool_create(actor=None, cluster=org.cluster, name="fast", label_key="speed", label_value="fast")
    org.nodes.append(make_node("both-1", gpus=4, labels={"gpu-type": "A100", "speed": "fast"}))
    org.load()
    login(client, users, "sysadmin")
    page = text(client.get(reverse("pool-detail", args=[org.a100.pk])).content.decode())
    assert "Label conflicts" in page and "both-1: matches a100, fast — counted in a100" in page


def test_pool_create_edit_are_for_system_administrators_only(client, org, users):
    for role in ["rnd_admin", "rnd_viewer", "proj_admin", "researcher", "cluster_viewer", "nobody"]:
        login(client, users, role)
        assert client.get(reverse("pool-create")).status_code == 403, role
        assert client.post(reverse("pool-create"), {"cluster": org.cluster.pk, "name": "x", "label_key": "k",
                                                    "label_value": "v", "gpu_placement": "binpack",
                                                    "cpu_placement": "binpack"}).status_code == 403, role
        assert client.get(reverse("pool-edit", args=[org.a100.pk])).status_code == 403, role
        assert client.post(reverse("pool-delete", args=[org.a100.pk]), {"confirm": "on"}).status_code == 403, role
    assert NodePool.objects.filter(name="x").count() == 0 and NodePool.objects.filter(pk=org.a100.pk).exists()


def test_create_a_pool_moves_matching_nodes_into_it(client, org, users):
    from kubesim import make_node

    org.nodes.append(make_node("h100-1", gpus=8, labels={"gpu-type": "H100"}))
    org.load()
    login(client, users, "sysadmin")
    data = {"cluster": org.cluster.pk, "name": "h100", "label_key": "gpu-type", "label_value": "H100",
            "gpu_placement": "spread", "cpu_placement": "binpack", "description": "", "gpu_limit": ""}
    # The first POST shows what moves; only the confirmation creates the pool.
    preview = client.post(reverse("pool-create"), data)
    assert preview.status_code == 200 and not NodePool.objects.filter(name="h100").exists()
    assert "default h100 1: h100-1 8 (0 ready)" in page_text(preview)
    response = client.post(reverse("pool-create"), {**data, "confirm": "1",
                                                    "previewed": f"{org.cluster.pk}:gpu-type=H100"})
    pool = NodePool.objects.get(name="h100")
    assert response.status_code == 302 and response.url == reverse("pool-detail", args=[pool.pk])
    assert pool.gpu_placement == "spread" and list(pool.nodes.values_list("name", flat=True)) == ["h100-1"]


def test_create_pool_errors_name_the_field_and_the_rule(client, org, users):
    login(client, users, "sysadmin")
    response = client.post(reverse("pool-create"), {
        "cluster": org.cluster.pk, "name": "Bad_Name", "label_key": "gpu-type", "label_value": "A100",
        "gpu_placement": "binpack", "cpu_placement": "binpack",
    })
    page = text(response.content.decode())
    assert response.status_code == 200
    assert ("Name: Use lowercase letters, digits and '-'; start and end with a letter or digit; at most 63 characters "
            "(“Bad_Name” holds capital letters and '_').") in page
    assert "Label value: Pool 'a100' already selects nodes by gpu-type=A100." in page
    assert not NodePool.objects.filter(name="Bad_Name").exists()


def test_edit_a_pool(client, org, users):
    login(client, users, "sysadmin")
    response = client.post(reverse("pool-edit", args=[org.a100.pk]), {
        "name": "a100", "label_key": "gpu-type", "label_value": "A100", "description": "Fast ones",
        "gpu_placement": "spread", "cpu_placement": "spread", "gpu_limit": "6",
    })
    assert response.status_code == 302
    org.a100.refresh_from_db()
    assert (org.a100.description, org.a100.gpu_placement, org.a100.gpu_limit) == ("Fast ones", "spread", 6)


def test_default_pool_form_has_no_name_or_label_and_it_cannot_be_deleted(client, org, users):
    login(client, users, "sysadmin")
    page = client.get(reverse("pool-edit", args=[org.default.pk])).content.decode()
    assert 'name="label_key"' not in page and 'name="name"' not in page
    assert b"Delete" not in client.get(reverse("pool-detail", args=[org.default.pk])).content
    response = client.post(reverse("pool-delete", args=[org.default.pk]), {"confirm": "on"}, follow=True)
    assert "The default pool cannot be deleted" in response.content.decode()
    assert NodePool.objects.filter(pk=org.default.pk).exists()


def test_deleting_a_pool_with_nodes_and_workloads_says_what_happens_and_needs_confirmation(client, org, users):
    from projects import services

    services.quota_update(actor=None, quota=org.quota(org.rnd, org.a100), expected_version=None, gpu_deserved=4)
    org.run("train-1", org.rnd_a, "a100-1", gpus=2)
    login(client, users, "sysadmin")
    page = text(client.get(reverse("pool-delete", args=[org.a100.pk])).content.decode())
    assert "Its 2 nodes will move to the default pool" in page
    # Words agree with their numbers: one workload keeps running, its GPUs count.
    assert "Its 1 running workload keeps running on those nodes; its GPUs then count in the default pool" in page
    assert "Its 5 quota rows (departments and projects) will be deleted, 1 of them with deserved GPUs" in page
    assert "department rnd: 4 GPUs" in page
    org.run("train-2", org.rnd_a, "a100-2", gpus=1)
    services.quota_update(actor=None, quota=org.quota(org.rnd, org.a100), expected_version=None, gpu_deserved=1)
    page = text(client.get(reverse("pool-delete", args=[org.a100.pk])).content.decode())
    assert "Its 2 running workloads keep running on those nodes; their GPUs then count" in page
    assert "department rnd: 1 GPU" in page and "1 GPUs" not in page
    # Without ticking the box nothing happens.
    response = client.post(reverse("pool-delete", args=[org.a100.pk]), {})
    assert response.status_code == 200 and "Tick the box to confirm" in response.content.decode()
    assert NodePool.objects.filter(pk=org.a100.pk).exists()
    response = client.post(reverse("pool-delete", args=[org.a100.pk]), {"confirm": "on"})
    assert response.status_code == 302 and not NodePool.objects.filter(pk=org.a100.pk).exists()
    assert set(Node.objects.filter(name__startswith="a100").values_list("pool__name", flat=True)) == {"default"}


def test_deleting_an_empty_pool_needs_no_tick(client, org, users):
    from nodepools import services

    pool = services.pool_create(actor=None, cluster=org.cluster, name="empty", label_key="k", label_value="v")
    login(client, users, "sysadmin")
    assert "It has no nodes." in text(client.get(reverse("pool-delete", args=[pool.pk])).content.decode())
    assert client.post(reverse("pool-delete", args=[pool.pk]), {}).status_code == 302
    assert not NodePool.objects.filter(pk=pool.pk).exists()


# --- Nodes -----------------------------------------------------------------------------------------

def test_nodes_table_default_columns_and_values(client, org, users):
    org.run("train-1", org.rnd_a, "a100-1", gpus=3, cpu="2", memory="4Gi")
    login(client, users, "sysadmin")
    response = client.get(reverse("node-list"), {"sort": "name"})
    assert headers(response) == ["Node", "Status", "Node pool", "GPU type", "Ready/total GPU devices",
                                 "Allocated GPUs", "Free GPU devices", "GPU utilization (%)",
                                 "Used/total GPU memory (GiB)", "CPU (cores)", "CPU memory (GiB)", "Pods", "Zone"]
    rows = table_rows(response)
    # No Prometheus named for the cluster: the GPU utilization columns say so on hover.
    assert rows[0] == ["a100-1", "Ready", "a100", "NVIDIA-A100-SXM4-40GB", "4/4", "3", "1", "—", "—", "64", "512",
                       "3", "—"]
    assert 'title="no Prometheus configured for this cluster"' in response.content.decode()
    assert [r[0] for r in rows] == ["a100-1", "a100-2", "v100-1", "v100-2"]


def test_node_status_shows_main_reason_and_every_reason_without_a_mouse(client, org, users):
    from kubesim import make_node

    org.nodes[0] = make_node("v100-1", gpus=4, gpu_product="Tesla-V100-SXM2-16GB", unschedulable=True,
                             conditions={"DiskPressure": "True"})
    org.load()
    login(client, users, "sysadmin")
    response = client.get(reverse("node-list"), {"status": "not_ready"})
    # The main reason and how many more; every reason in a disclosure a keyboard opens (and the title).
    assert [r[:2] for r in table_rows(response)] == [
        ["v100-1", "Not ready (Disk pressure) +1 Disk pressure Scheduling disabled"]]
    html = response.content.decode()
    assert re.search(r'<details class="reasons-popover"><summary[^>]*><span class="status status-not_ready"[^>]*>'
                     r'Not ready \(Disk pressure\)</span> <span class="more">\+1</span></summary>'
                     r'<ul class="reasons"><li>Disk pressure</li><li>Scheduling disabled</li></ul></details>', html)
    assert 'title="Disk pressure\nScheduling disabled"' in html
    from tests.pages import csv_of

    rows = csv_of(client.get(reverse("node-list"), {"status": "not_ready", "format": "csv"}))
    assert rows[1][:2] == ["v100-1", "Not ready (Disk pressure; Scheduling disabled)"]
    node = Node.objects.get(name="v100-1")
    page = client.get(reverse("node-detail", args=[node.pk]))
    assert [r for r in table_rows(page, "node-conditions") if r[0] == "DiskPressure"][0][1] == "True"
    assert "Reasons Disk pressure Scheduling disabled" in text(page.content.decode())


def test_nodes_filters_search_sort_and_pagination(client, org, users, other):
    login(client, users, "sysadmin")
    url = reverse("node-list")
    assert first_column(client.get(url, {"pool": org.a100.pk})) == ["a100-1", "a100-2"]
    assert first_column(client.get(url, {"gpu_product": "Tesla-V100-SXM2-16GB"})) == ["v100-1", "v100-2"]
    assert first_column(client.get(url, {"q": "a100-2"})) == ["a100-2"]
    assert first_column(client.get(url, {"cluster": other.pk})) == []
    assert first_column(client.get(url, {"sort": "-name"})) == ["v100-2", "v100-1", "a100-2", "a100-1"]
    page2 = client.get(url, {"sort": "name", "per_page": 25, "page": 1})
    assert len(table_rows(page2)) == 4
    # A page past the end shows the last page.
    assert first_column(client.get(url, {"sort": "name", "per_page": 25, "page": 99})) == first_column(page2)


def test_nodes_filter_by_zone(client, org, users):
    from kubesim import make_node

    org.nodes.append(make_node("zoned", gpus=0, zone="eu-west-1b"))
    org.load()
    login(client, users, "sysadmin")
    response = client.get(reverse("node-list"), {"zone": "eu-west-1b"})
    assert first_column(response) == ["zoned"]
    assert re.search(r'<option value="eu-west-1b"[^>]*>eu-west-1b</option>', response.content.decode())


def test_nodes_pagination_pages_through_many_nodes(client, org, users):
    from kubesim import make_node

    org.nodes += [make_node(f"cpu-{i:03d}") for i in range(60)]
    org.load()
    login(client, users, "sysadmin")
    first = client.get(reverse("node-list"), {"sort": "name"})
    second = client.get(reverse("node-list"), {"sort": "name", "page": 2})
    assert len(table_rows(first)) == 50 and len(table_rows(second)) == 14
    assert "51–64 of 64" in second.content.decode()


def test_empty_dropdowns_mean_all(client, org, users):
    # What the filter form sends when every dropdown says "All".
    login(client, users, "sysadmin")
    response = client.get(reverse("node-list") + f"?q=&cluster=&pool={org.a100.pk}&status=&reason=&gpu_product=&zone=")
    assert first_column(response) == ["a100-1", "a100-2"]


def test_invalid_filter_value_shows_no_rows_and_the_error(client, org, users):
    login(client, users, "sysadmin")
    response = client.get(reverse("node-list"), {"status": "sleepy"})
    assert response.status_code == 200 and table_rows(response) == []
    assert "Select a valid choice" in response.content.decode()


@pytest.mark.parametrize("role", ROLES)
def test_node_list_and_page_per_role(client, org, users, other, role):
    login(client, users, role)
    response = client.get(reverse("node-list"), {"sort": "name"})
    assert response.status_code == 200
    assert first_column(response) == ([] if role == "nobody" else ["a100-1", "a100-2", "v100-1", "v100-2"])
    node = Node.objects.get(name="a100-1")
    detail = client.get(reverse("node-detail", args=[node.pk]))
    assert detail.status_code == (404 if role == "nobody" else 200)
    if role != "nobody":
        assert (b"Move to pool" in detail.content) == (role == "sysadmin")


def test_node_page_shows_labels_taints_and_pods(client, org, users):
    org.run("train-1", org.rnd_a, "a100-1", gpus=1)
    login(client, users, "sysadmin")
    node = Node.objects.get(name="a100-1")
    page = client.get(reverse("node-detail", args=[node.pk]))
    labels = dict(tuple(r) for r in table_rows(page, "node-labels"))
    assert labels["gpu-type"] == "A100"
    assert "train-1" in first_column(page, "node-pods-table")


def test_node_pods_are_restricted_to_what_the_user_may_see(client, org, users):
    org.run("rnd-job", org.rnd_a, "a100-1", gpus=1)
    org.run("ops-job", org.ops_a, "a100-1", gpus=1)
    node = Node.objects.get(name="a100-1")
    login(client, users, "researcher")
    pods = first_column(client.get(reverse("node-detail", args=[node.pk])), "node-pods-table")
    assert "rnd-job" in pods and "ops-job" not in pods


def test_node_move_is_refused_to_non_administrators(client, org, users):
    node = Node.objects.get(name="v100-1")
    login(client, users, "rnd_admin")
    assert client.post(reverse("node-move", args=[node.pk]), {"pool": org.a100.pk}).status_code == 403
    login(client, users, "nobody")
    assert client.post(reverse("node-move", args=[node.pk]), {"pool": org.a100.pk}).status_code == 403


def test_node_move_reports_an_unreachable_cluster_and_changes_nothing(client, org, users):
    # The lab cluster has no kubeconfig: the patch fails and the page says so.
    node = Node.objects.get(name="v100-1")
    login(client, users, "sysadmin")
    response = client.post(reverse("node-move", args=[node.pk]), {"pool": org.a100.pk}, follow=True)
    assert "Could not move node 'v100-1' to pool 'a100'" in page_text(response)
    node.refresh_from_db()
    assert node.pool == org.default


def test_node_move_form_rejects_a_pool_of_another_cluster(client, org, users, other):
    node = Node.objects.get(name="v100-1")
    login(client, users, "sysadmin")
    response = client.post(reverse("node-move", args=[node.pk]), {"pool": other.default_pool.pk}, follow=True)
    assert "Select a valid choice" in response.content.decode()


def test_nodes_htmx_partial_keeps_filters(client, org, users):
    login(client, users, "sysadmin")
    response = htmx(client, reverse("node-list") + "?pool=%d&sort=-name" % org.a100.pk)
    html = response.content.decode()
    assert html.lstrip().startswith('<div id="table"') and "<html" not in html
    assert first_column(response) == ["a100-2", "a100-1"]


def test_pages_are_readable_without_javascript(client, org, users):
    # Sort links, pagination, filters and the column chooser are plain links and forms.
    login(client, users, "sysadmin")
    page = client.get(reverse("node-list")).content.decode()
    assert 'href="?sort=name"' in page
    assert '<form method="get" class="filters" action="/nodes/"' in page
    assert 'action="/tables/nodes/columns/"' in page


def test_node_move_sets_the_pools_label_in_the_cluster(client, users, tmp_path, emulators):
    # The form calls nodepools.services.node_move_to_pool, which patches the Node over HTTP (emulator).
    from nodepools import services
    from kubesim import make_node

    emu = emulators(bookmark_interval=1.0)  # KubeEmulator's own, which this test always had
    emu.load(nodes=[make_node("n-1", gpus=4, labels={"gpu-type": "V100"})], pods=[])
    cluster = services.cluster_create(actor=None, name="emu", kube_context="emulator",
                                      kubeconfig_path=str(emu.write_kubeconfig(tmp_path / "kubeconfig")))
    pool = services.pool_create(actor=None, cluster=cluster, name="fast", label_key="speed", label_value="fast")
    services.cluster_objects_replace(cluster=cluster, nodes=[emu.get_node("n-1")], pods=[])
    node = Node.objects.get(cluster=cluster, name="n-1")
    login(client, users, "sysadmin")
    page = client.get(reverse("node-detail", args=[node.pk])).content.decode()
    assert f'<option value="{pool.pk}">fast</option>' in page
    preview = client.post(reverse("node-move", args=[node.pk]), {"pool": pool.pk})
    assert "Move node n-1 to pool fast?" in page_text(preview)
    assert "speed" not in emu.get_node("n-1")["metadata"]["labels"]
    response = client.post(reverse("node-move", args=[node.pk]), {
        "pool": pool.pk, "confirm": "1", "resource_version": emu.get_node("n-1")["metadata"]["resourceVersion"],
    }, follow=True)
    assert "Node 'n-1' is being moved to pool 'fast'" in page_text(response)
    assert emu.get_node("n-1")["metadata"]["labels"]["speed"] == "fast"


@pytest.mark.parametrize("query", ["sort=password", "sort=-", "page=abc", "per_page=-5", "pool=abc", "cluster=999999",
                                   "sort=password&format=csv", "format=csv&columns=nope"])
def test_bad_query_strings_never_fail(client, org, users, query):
    login(client, users, "sysadmin")
    for url in [reverse("node-list"), reverse("pool-list"), reverse("department-list"), reverse("project-list")]:
        response = client.get(f"{url}?{query}")
        assert response.status_code == 200, (url, query)


@pytest.mark.parametrize("sort, first_two", [
    ("-gpu_allocated", ["v100-2", "a100-2"]),
    ("gpu_free", ["v100-2", "a100-2"]),
    ("-cpu_allocated", ["v100-2", "a100-2"]),
    ("-memory_allocated", ["v100-2", "a100-2"]),
    ("-pods", ["a100-2", "v100-2"]),
])
def test_nodes_sorted_by_a_usage_column_count_running_pods_only(client, org, users, sort, first_two):
    org.run("big", org.rnd_a, "v100-2", gpus=2, cpu="8", memory="64Gi")
    org.run("small", org.rnd_a, "a100-2", gpus=1, cpu="4", memory="8Gi")
    org.run("helper", org.rnd_b, "a100-2", gpus=0, cpu="1", memory="1Gi")
    # A finished pod holds nothing: were it counted, a100-1 would lead every usage sort.
    org.run("done", org.rnd_a, "a100-1", gpus=4, cpu="60", memory="400Gi", phase="Succeeded")
    login(client, users, "rnd_viewer")
    # Every column shown: a table sorts only by the columns it shows.
    client.post(reverse("table-columns", args=["nodes"]), {"order": NodeTable.column_names(),
                                                           "columns": NodeTable.column_names()})
    assert first_column(client.get(reverse("node-list"), {"sort": sort}))[:2] == first_two
    # With a filter, and with another page size: the sort spans the filtered rows only.
    assert first_column(client.get(reverse("node-list"), {"sort": sort, "pool": org.a100.pk})) == ["a100-2", "a100-1"]
    rows = first_column(client.get(reverse("node-list"), {"sort": sort, "per_page": 25, "page": 1}))
    assert rows[:2] == first_two and len(rows) == 4


def test_nodes_page_with_every_column_agrees_with_its_csv(client, org, users):
    from tests.pages import csv_of

    org.run("train-1", org.rnd_a, "a100-1", gpus=3)
    login(client, users, "sysadmin")
    client.post(reverse("table-columns", args=["nodes"]), {"order": NodeTable.column_names(),
                                                           "columns": NodeTable.column_names()})
    response = client.get(reverse("node-list"), {"sort": "name"})
    assert response.status_code == 200
    csv_rows = csv_of(client.get(reverse("node-list"), {"sort": "name", "format": "csv"}))
    # One "ready/total" cell on the page is two number columns in the CSV (a spreadsheet reads "4/4" as a date).
    at = csv_rows[0].index("Ready GPU devices")
    assert csv_rows[0][at + 1] == "Total GPU devices"
    csv_rows = [row[:at] + (["Ready/total GPU devices"] if i == 0 else [f"{row[at]}/{row[at + 1]}"]) + row[at + 2:]
                for i, row in enumerate(csv_rows)]
    # Likewise used/total GPU memory (empty without a Prometheus: "—" on the page).
    at = csv_rows[0].index("Used GPU memory (GiB)")
    assert csv_rows[0][at + 1] == "Total GPU memory reported (GiB)"
    csv_rows = [row[:at] + (["Used/total GPU memory (GiB)"] if i == 0 else
                            [f"{row[at]}/{row[at + 1]}" if row[at] else ""]) + row[at + 2:]
                for i, row in enumerate(csv_rows)]
    # And the MIG layout asked and its state ("—" on the page when no layout was asked of the node).
    at = csv_rows[0].index("MIG layout asked")
    assert csv_rows[0][at + 1] == "MIG layout state"
    csv_rows = [row[:at] + (["MIG layout"] if i == 0 else [f"{row[at]} {row[at + 1]}".strip()]) + row[at + 2:]
                for i, row in enumerate(csv_rows)]
    assert headers(response) == csv_rows[0]
    # The page shows "—" where the CSV leaves the cell empty; otherwise the same text.
    assert [[cell if cell != "—" else "" for cell in row] for row in table_rows(response)] == csv_rows[1:]


def test_deleting_a_pool_of_one_node_says_it_in_the_singular(client, org, users):
    pool = NodePool.objects.get(pk=org.a100.pk)
    Node.objects.filter(pool=pool).exclude(pk=Node.objects.filter(pool=pool).order_by("name").first().pk).update(
        pool=org.default)  # a pool of one node
    login(client, users, "sysadmin")
    response = client.post(reverse("pool-delete", args=[pool.pk]), {"confirm": "on"}, follow=True)
    assert "Node pool 'a100' deleted; its 1 node is now in the default pool." in page_text(response)
