"""Choosing table columns (remembered per user) and downloading the current view as CSV."""
import re

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse

from nodepools.tables import NodeTable
from tests.pages import csv_of, headers, login
from ui import services
from ui.models import TablePreference
from ui.selectors import table_columns
from ui.tables import csv_cell


# --- Preferences -----------------------------------------------------------------------------------

def test_preference_keeps_order_and_drops_duplicates(users):
    user = users["rnd_viewer"]
    services.table_preference_set(user=user, table="nodes", columns=["pool", "name", "pool"],
                                  allowed=NodeTable.column_names())
    assert table_columns(user=user, table="nodes", allowed=NodeTable.column_names(), default=["name"]) == ["pool", "name"]


def test_preference_refuses_unknown_or_no_columns(users):
    with pytest.raises(ValidationError, match="Unknown column"):
        services.table_preference_set(user=users["sysadmin"], table="nodes", columns=["name", "password"],
                                      allowed=NodeTable.column_names())
    with pytest.raises(ValidationError, match="at least one column"):
        services.table_preference_set(user=users["sysadmin"], table="nodes", columns=[], allowed=NodeTable.column_names())


def test_saved_columns_that_no_longer_exist_are_ignored(users):
    TablePreference.objects.create(user=users["sysadmin"], table="nodes", columns=["gone", "zone"])
    assert table_columns(user=users["sysadmin"], table="nodes", allowed=NodeTable.column_names(),
                         default=["name"]) == ["zone"]


def test_preferences_are_per_user(client, org, users):
    login(client, users, "sysadmin")
    client.post(reverse("table-columns", args=["nodes"]), {"order": ["zone", "name"], "columns": ["zone", "name"]})
    assert headers(client.get(reverse("node-list"))) == ["Zone", "Node"]
    login(client, users, "cluster_viewer")
    assert headers(client.get(reverse("node-list")))[:2] == ["Node", "Status"]


def test_column_chooser_saves_the_choice_and_moves_columns(client, org, users):
    login(client, users, "cluster_viewer")
    url = reverse("table-columns", args=["nodes"])
    order = ["name", "status", "pool", "zone", "cluster"]
    response = client.post(url, {"order": order, "columns": ["name", "status", "zone"], "next": "/nodes/?pool=1"})
    assert response.status_code == 302 and response.url == "/nodes/?pool=1"
    assert headers(client.get(reverse("node-list"))) == ["Node", "Status", "Zone"]
    client.post(url, {"order": ["name", "status", "zone"], "columns": ["name", "status", "zone"], "move": "up:zone"})
    assert headers(client.get(reverse("node-list"))) == ["Node", "Zone", "Status"]
    client.post(url, {"order": ["name", "zone", "status"], "columns": ["name", "zone", "status"], "move": "down:name"})
    assert headers(client.get(reverse("node-list"))) == ["Zone", "Node", "Status"]
    client.post(url, {"reset": "1"})
    assert headers(client.get(reverse("node-list")))[:3] == ["Node", "Status", "Node pool"]


def test_column_chooser_refuses_nothing_unknown_tables_and_foreign_redirects(client, org, users):
    login(client, users, "cluster_viewer")
    response = client.post(reverse("table-columns", args=["nodes"]), {"order": ["name"], "next": "/nodes/"}, follow=True)
    assert "Choose at least one column." in response.content.decode()
    assert client.post(reverse("table-columns", args=["secrets"]), {"columns": ["name"]}).status_code == 404
    response = client.post(reverse("table-columns", args=["nodes"]), {"columns": ["name"], "order": ["name"],
                                                                     "next": "https://evil.example/"})
    assert response.url == "/"


def test_column_chooser_needs_a_login_and_a_post(client, org, users):
    assert client.post(reverse("table-columns", args=["nodes"]), {"columns": ["name"]}).status_code == 302
    login(client, users, "sysadmin")
    assert client.get(reverse("table-columns", args=["nodes"])).status_code == 405


# --- CSV -------------------------------------------------------------------------------------------

def test_csv_cells_starting_like_formulas_are_escaped():
    for risky in ["=1+1", "+1", "-1", "@SUM(A1)", "\tx", "\rx", "\nx", "\0x"]:
        assert csv_cell(risky) == "'" + risky
    assert csv_cell("plain") == "plain" and csv_cell(None) == "" and csv_cell(True) == "yes"


def test_nodes_csv_is_the_current_view_columns_order_filters_and_sort(client, org, users):
    org.run("train-1", org.rnd_a, "a100-1", gpus=3)
    login(client, users, "sysadmin")
    services.table_preference_set(user=users["sysadmin"], table="nodes",
                                  columns=["gpu_allocated", "name", "pool", "status"], allowed=NodeTable.column_names())
    response = client.get(reverse("node-list"), {"pool": org.a100.pk, "sort": "-name", "format": "csv"})
    assert response["Content-Type"] == "text/csv; charset=utf-8"
    assert re.fullmatch(r'attachment; filename="nodes_lab_\d{4}-\d\d-\d\dT\d{4}Z\.csv"', response["Content-Disposition"])
    assert csv_of(response) == [
        ["Allocated GPUs", "Node", "Node pool", "Status"],
        ["0", "a100-2", "a100", "Ready"],
        ["3", "a100-1", "a100", "Ready"],
    ]


def test_nodes_csv_with_all_columns(client, org, users):
    from kubesim import make_node

    org.nodes[0] = make_node("v100-1", gpus=4, gpu_product="Tesla-V100-SXM2-16GB", gpu_memory_mib=16384,
                             unschedulable=True, zone="us-east-1a", instance_type="p3.8xlarge",
                             capacity_type="spot", cpu="32", memory="244Gi")
    org.load()
    login(client, users, "sysadmin")
    rows = csv_of(client.get(reverse("node-list"), {"q": "v100-1", "format": "csv", "columns": "all"}))
    assert rows == [
        ["Node", "Status", "Node pool", "Cluster", "GPU type", "Ready GPU devices", "Total GPU devices", "GPU memory (GiB)",
         "Allocated GPUs", "Free GPU devices", "CPU (cores)", "CPU memory (GiB)", "Allocated CPU (cores)",
         "Allocated CPU memory (GiB)", "Pods", "Zone", "Instance type", "Capacity type", "GPU utilization (%)",
         "Used GPU memory (GiB)", "Total GPU memory reported (GiB)", "MIG layout asked", "MIG layout state"],
        # No Prometheus for this cluster: no GPU utilization figures; no MIG layout asked of the node.
        ["v100-1", "Not ready (Scheduling disabled)", "default", "lab", "Tesla-V100-SXM2-16GB", "0", "4", "64", "0", "0",
         "32", "244", "0.2", "0.2", "2", "us-east-1a", "p3.8xlarge", "spot", "", "", "", "", ""],
    ]


def test_csv_holds_only_rows_the_user_may_see(client, org, users):
    from nodepools import services as pool_services
    from kubesim import make_node

    other = pool_services.cluster_create(actor=None, name="other")
    pool_services.cluster_objects_replace(cluster=other, nodes=[make_node("secret-node")], pods=[])
    login(client, users, "rnd_viewer")
    names = [r[0] for r in csv_of(client.get(reverse("node-list"), {"format": "csv", "sort": "name"}))[1:]]
    assert names == ["a100-1", "a100-2", "v100-1", "v100-2"]
    # Asking for the other cluster by filter shows an error, not its rows.
    assert csv_of(client.get(reverse("node-list"), {"format": "csv", "cluster": other.pk}))[1:] == []
    login(client, users, "nobody")
    assert csv_of(client.get(reverse("node-list"), {"format": "csv"})) == [csv_of(
        client.get(reverse("node-list"), {"format": "csv"}))[0]]


def test_department_csv_escapes_formula_cells(client, org, users):
    from projects import services as org_services

    risky = ["=HYPERLINK(\"http://x\")", "+1", "-1", "@SUM(A1)", "\tx", "\rx", "\nx"]
    for i, description in enumerate(risky):
        org_services.department_create(actor=None, cluster=org.cluster, name=f"d{i}", description=description)
    login(client, users, "sysadmin")
    services.table_preference_set(user=users["sysadmin"], table="departments", columns=["name", "description"],
                                  allowed=["name", "cluster", "description", "project_count", "gpu_deserved",
                                           "gpu_allocated", "created"])
    rows = csv_of(client.get(reverse("department-list"), {"q": "", "sort": "name", "format": "csv"}))
    assert rows[0] == ["Department", "Description"]
    assert dict(rows[1:]) == {"ops": "", "rnd": "", **{f"d{i}": "'" + d for i, d in enumerate(risky)}}


def test_pools_csv_and_projects_csv(client, org, users):
    org.run("train-1", org.rnd_a, "a100-1", gpus=3)
    login(client, users, "rnd_admin")
    rows = csv_of(client.get(reverse("pool-list"), {"sort": "name", "format": "csv"}))
    assert rows == [
        ["Node pool", "Cluster", "Status", "Label key", "Label value", "Nodes", "Total GPU devices", "Allocated GPUs",
         "Free GPUs", "Utilization of allocated GPUs (%)", "Idle allocated GPUs", "Projects' GPU quota (sum)",
         "Workloads", "GPU placement strategy"],
        # No Prometheus for this cluster: the GPU utilization cells are empty.
        ["a100", "lab", "Ready", "gpu-type", "A100", "2", "8", "3", "5", "", "", "0", "1", "Bin-pack"],
        ["default", "lab", "Ready", "", "", "2", "8", "0", "8", "", "", "0", "0", "Bin-pack"],
    ]
    rows = csv_of(client.get(reverse("project-list"), {"sort": "-name", "format": "csv"}))
    assert rows == [
        ["Project", "Department", "Cluster", "Namespaces", "Deserved GPUs per pool", "Allocated GPUs per pool",
         "Workloads", "Over-quota allowed"],
        ["rnd-b", "rnd", "lab", "runai-rnd-b", "a100 0 · default 0", "a100 0 · default 0", "0", "yes"],
        ["rnd-a", "rnd", "lab", "runai-rnd-a", "a100 0 · default 0", "a100 3 · default 0", "1", "yes"],
    ]


def test_csv_download_streams_from_an_async_iterator(client, org, users):
    login(client, users, "sysadmin")
    response = client.get(reverse("node-list"), {"format": "csv"})
    assert response.streaming and response.is_async
    assert len(csv_of(response)) == 5


def test_download_links_carry_the_current_filters_and_sort(client, org, users):
    login(client, users, "sysadmin")
    page = client.get(reverse("node-list"), {"pool": org.a100.pk, "sort": "-name", "page": 1}).content.decode()
    assert f'href="/nodes/?pool={org.a100.pk}&amp;sort=-name&amp;format=csv"' in page
    assert f'href="/nodes/?pool={org.a100.pk}&amp;sort=-name&amp;format=csv&amp;columns=all"' in page


def test_nodes_csv_sorted_by_a_usage_column(client, org, users):
    org.run("train-1", org.rnd_a, "a100-2", gpus=3)
    org.run("train-2", org.rnd_a, "v100-1", gpus=1)
    login(client, users, "sysadmin")
    services.table_preference_set(user=users["sysadmin"], table="nodes", columns=["name", "gpu_allocated", "gpu_free"],
                                  allowed=NodeTable.column_names())
    rows = csv_of(client.get(reverse("node-list"), {"sort": "-gpu_allocated", "format": "csv"}))
    assert rows[1:3] == [["a100-2", "3", "1"], ["v100-1", "1", "3"]]
    rows = csv_of(client.get(reverse("node-list"), {"sort": "gpu_free", "format": "csv"}))
    assert rows[1] == ["a100-2", "3", "1"]
