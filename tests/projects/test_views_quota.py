"""The quota grid and its inline editor: rules of docs/concepts.md#quota shown in place, concurrent edits refused."""
import re

import pytest
from django.urls import reverse

from projects.models import Quota
from tests.pages import ROLES, htmx, login, page_text, table_rows, text


def grid_rows(response):
    return [r[0] for r in table_rows(response, "quota-grid")]


def editor_post(client, quota, **values):
    data = {"gpu_deserved": quota.gpu_deserved, "cpu_deserved": "", "memory_deserved_gib": "", "gpu_limit": "",
            "cpu_limit": "", "memory_limit_gib": "", "over_quota_weight": quota.over_quota_weight,
            "rank": quota.rank, "version": quota.version}
    data.update(values)
    return client.post(reverse("quota-edit", args=[quota.pk]), data, HTTP_HX_REQUEST="true",
                       HTTP_HX_TARGET=f"quota-{quota.pk}")


@pytest.mark.parametrize("role", ROLES)
def test_quota_grid_per_role(client, org, users, role):
    login(client, users, role)
    response = client.get(reverse("quota-grid", args=[org.cluster.pk]))
    if role == "nobody":
        assert response.status_code == 404
        return
    assert response.status_code == 200
    expected = {
        "sysadmin": ["ops", "ops-a", "rnd", "rnd-a", "rnd-b"], "cluster_viewer": ["ops", "ops-a", "rnd", "rnd-a", "rnd-b"],
        "rnd_admin": ["rnd", "rnd-a", "rnd-b"], "rnd_viewer": ["rnd", "rnd-a", "rnd-b"],
        "proj_admin": ["rnd-a"], "researcher": ["rnd-a"],
    }[role]
    assert grid_rows(response) == expected
    html = response.content.decode()
    editable = set(re.findall(r'hx-get="/quota/(\d+)/edit/"', html))
    if role == "sysadmin":
        assert len(editable) == 10  # every row of every pool
    elif role == "rnd_admin":
        # Its projects' quotas, not its own department's (that is the system administrator's).
        assert editable == {str(q.pk) for q in Quota.objects.filter(project__department=org.rnd)}
    else:
        assert editable == set()


def test_grid_cells_show_deserved_and_allocated(client, org, users):
    from projects import services

    services.quota_update(actor=None, quota=org.quota(org.rnd_a, org.a100), expected_version=None, gpu_deserved=1.5)
    org.run("train-1", org.rnd_a, "a100-1", gpus=2)
    login(client, users, "sysadmin")
    rows = {r[0]: r[1:] for r in table_rows(client.get(reverse("quota-grid", args=[org.cluster.pk])), "quota-grid")}
    assert rows["rnd-a"] == ["0 0", "1.5 2"]  # default: 0 deserved / 0 allocated; a100: 1.5 / 2


def test_editor_opens_inline_as_an_htmx_fragment(client, org, users):
    quota = org.quota(org.rnd_a, org.a100)
    login(client, users, "rnd_admin")
    response = htmx(client, reverse("quota-edit", args=[quota.pk]), target=f"quota-{quota.pk}")
    html = response.content.decode()
    assert "<html" not in html and html.lstrip().startswith('<div class="quota-editor"')
    for name in ["gpu_deserved", "cpu_deserved", "memory_deserved_gib", "gpu_limit", "cpu_limit", "memory_limit_gib",
                 "over_quota_weight", "rank"]:
        assert f'name="{name}"' in html
    assert f'<input type="hidden" name="version" value="{quota.version}"' in html


def test_saving_a_valid_quota(client, org, users):
    quota = org.quota(org.rnd_a, org.a100)
    login(client, users, "rnd_admin")
    response = editor_post(client, quota, gpu_deserved="0", cpu_deserved="8", over_quota_weight="5", rank="6",
                           gpu_limit="4")
    assert "Saved: 0 deserved GPUs." in text(response.content.decode())
    quota.refresh_from_db()
    assert (quota.cpu_deserved, quota.over_quota_weight, quota.rank, quota.gpu_limit, quota.version) == (8, 5, 6, 4, 2)


def test_projects_over_their_department_is_a_warning_shown_in_place(client, org, users):
    quota = org.quota(org.rnd_a, org.a100)
    login(client, users, "rnd_admin")
    page = text(editor_post(client, quota, gpu_deserved="3").content.decode())
    assert "Warning: Projects of rnd now have 3 GPUs deserved in a100, above the department's 0." in page
    quota.refresh_from_db()
    assert quota.gpu_deserved == 3


def test_projects_over_their_department_is_an_error_when_the_cluster_says_so(client, org, users):
    org.cluster.limit_projects_to_department_quota = True
    org.cluster.save()
    quota = org.quota(org.rnd_a, org.a100)
    login(client, users, "rnd_admin")
    page = text(editor_post(client, quota, gpu_deserved="3").content.decode())
    assert "Deserved GPUs: Projects of department 'rnd' would have 3 GPUs" in page
    assert "This cluster limits projects to their department's quota." in page
    quota.refresh_from_db()
    assert quota.gpu_deserved == 0 and quota.version == 1


def test_quota_below_non_preemptible_usage_is_refused(client, org, users):
    org.run("serve-1", org.rnd_a, "a100-1", gpus=2, priority=125)
    quota = org.quota(org.rnd_a, org.a100)
    login(client, users, "sysadmin")
    page = text(editor_post(client, quota, gpu_deserved="1").content.decode())
    assert ("Deserved GPUs: Non-preemptible workloads of project 'rnd-a' already use 2 GPUs in pool 'a100'; "
            "its GPU quota cannot be set below that.") in page


def test_bad_numbers_name_the_field(client, org, users):
    quota = org.quota(org.rnd_a, org.a100)
    login(client, users, "sysadmin")
    page = text(editor_post(client, quota, gpu_deserved="-1").content.decode())
    assert "Deserved GPUs: GPU quota cannot be negative." in page
    page = text(editor_post(client, quota, gpu_limit="abc", over_quota_weight="-2").content.decode())
    assert "GPU limit: “abc” is not a number: write digits 0-9, with a point for a fraction (e.g. 2.50)." in page
    assert "Over-quota weight: Cannot be negative: enter 0 or more." in page
    quota.refresh_from_db()
    assert quota.version == 1


def test_limit_below_deserved_is_refused_on_the_limit_field(client, org, users):
    quota = org.quota(org.rnd, org.a100)
    login(client, users, "sysadmin")
    page = text(editor_post(client, quota, gpu_deserved="4", gpu_limit="2").content.decode())
    assert "GPU limit: The GPU limit (2) cannot be lower than the deserved GPU quota (4)." in page


def test_oversubscription_is_a_warning(client, org, users):
    quota = org.quota(org.rnd, org.a100)
    login(client, users, "sysadmin")
    page = text(editor_post(client, quota, gpu_deserved="10").content.decode())
    assert ("Warning: Departments now have 10 GPUs deserved in a100, above its 8 ready GPUs (of 8): "
            "over-subscription ratio 1.25.") in page


def test_a_concurrent_change_is_reported_and_nothing_is_overwritten(client, org, users):
    from projects import services

    quota = org.quota(org.rnd_a, org.a100)
    stale_version = quota.version
    # Someone else saves first.
    services.quota_update(actor=users["sysadmin"], quota=quota, expected_version=stale_version, gpu_deserved=1)
    login(client, users, "rnd_admin")
    page = text(editor_post(client, quota, gpu_deserved="2", version=stale_version).content.decode())
    assert "was changed by someone else meanwhile (version 2, you edited version 1). Nothing was saved" in page
    assert "Reload the current values" in page
    quota.refresh_from_db()
    assert quota.gpu_deserved == 1 and quota.version == 2


def test_viewers_see_the_quota_but_cannot_save(client, org, users):
    quota = org.quota(org.rnd_a, org.a100)
    login(client, users, "rnd_viewer")
    response = client.get(reverse("quota-edit", args=[quota.pk]))
    assert response.status_code == 200 and "<form method=\"post\" action=\"/quota/" not in response.content.decode()
    assert editor_post(client, quota, gpu_deserved="3").status_code == 403
    quota.refresh_from_db()
    assert quota.gpu_deserved == 0


def test_department_admin_cannot_edit_its_own_department_row_or_others(client, org, users):
    login(client, users, "rnd_admin")
    assert editor_post(client, org.quota(org.rnd, org.a100), gpu_deserved="5").status_code == 403
    assert editor_post(client, org.quota(org.ops_a, org.a100), gpu_deserved="5").status_code == 404
    assert client.get(reverse("quota-edit", args=[org.quota(org.ops, org.a100).pk])).status_code == 404


def test_editor_works_without_javascript_as_a_page(client, org, users):
    quota = org.quota(org.rnd_a, org.a100)
    login(client, users, "rnd_admin")
    page = client.get(reverse("quota-edit", args=[quota.pk])).content.decode()
    assert "<html" in page and "Quota of project rnd-a in pool a100" in text(page)
    response = client.post(reverse("quota-edit", args=[quota.pk]), {
        "gpu_deserved": "0.5", "over_quota_weight": "2", "rank": "3", "version": "1"})
    assert "Saved: 0.5 deserved GPUs." in page_text(response)


def test_grid_htmx_refresh(client, org, users):
    login(client, users, "sysadmin")
    response = htmx(client, reverse("quota-grid", args=[org.cluster.pk]))
    assert response.content.decode().lstrip().startswith('<div id="table"')


# --- Capacity against quota, per pool, in the grid's head ----------------------------------------------

def summary_of(html):
    """The grid head's per-pool summary: {row label: [cell text per pool]} and the pools marked over-subscribed."""
    head = re.search(r'<thead id="quota-summary"[^>]*>(.*?)</thead>', html, re.S)
    assert head, "the grid has no per-pool summary"
    rows = {}
    for row in re.findall(r'<tr class="pool-summary"[^>]*>(.*?)</tr>', head.group(1), re.S):
        cells = [text(c) for c in re.findall(r"<t[dh][^>]*>(.*?)</t[dh]>", row, re.S)]
        rows[cells[0]] = cells[1:]
    marked = re.findall(r'<td class="num oversubscribed" data-pool="([^"]+)"', head.group(1))
    return rows, marked


def make_a100_2_not_ready(org):
    from kubesim import make_node

    org.nodes[3] = make_node("a100-2", gpus=4, gpu_product="NVIDIA-A100-SXM4-40GB", gpu_memory_mib=40960,
                             labels={"gpu-type": "A100"}, ready=False)
    org.load()


def test_grid_head_shows_each_pools_ready_gpus_deserved_sum_and_ratio_marked_above_1(client, org, users):
    from projects import services

    make_a100_2_not_ready(org)
    for owner, pool, gpus in [(org.rnd, org.a100, 3), (org.ops, org.a100, 2), (org.rnd, org.default, 4)]:
        services.quota_update(actor=None, quota=org.quota(owner, pool), expected_version=None, gpu_deserved=gpus)
    login(client, users, "rnd_viewer")  # sees only rnd's rows, yet the pool's facts are the pool's
    rows, marked = summary_of(client.get(reverse("quota-grid", args=[org.cluster.pk])).content.decode())
    # columns: default, a100
    assert rows == {
        "Ready / total GPUs": ["8 / 8", "4 / 8"],
        "Departments' deserved GPUs (Σ)": ["4", "5"],
        "Over-subscription (Σ deserved / ready)": ["0.5", "1.25 over-subscribed"],
    }
    assert marked == ["a100"]


def test_a_pool_without_ready_gpus_but_with_quota_is_marked(client, org, users):
    from kubesim import make_node
    from projects import services

    org.nodes[2] = make_node("a100-1", gpus=4, labels={"gpu-type": "A100"}, ready=False)
    make_a100_2_not_ready(org)
    services.quota_update(actor=None, quota=org.quota(org.rnd, org.a100), expected_version=None, gpu_deserved=1)
    login(client, users, "sysadmin")
    rows, marked = summary_of(client.get(reverse("quota-grid", args=[org.cluster.pk])).content.decode())
    assert rows["Ready / total GPUs"] == ["8 / 8", "0 / 8"]
    assert rows["Over-subscription (Σ deserved / ready)"] == ["0", "no ready GPUs over-subscribed"]
    assert marked == ["a100"]


def test_inline_save_sends_the_updated_summary_and_closing_keeps_it(client, org, users):
    quota = org.quota(org.rnd, org.a100)
    login(client, users, "sysadmin")
    grid = reverse("quota-grid", args=[org.cluster.pk])
    rows, marked = summary_of(client.get(grid).content.decode())
    assert rows["Departments' deserved GPUs (Σ)"] == ["0", "0"] and marked == []

    response = editor_post(client, quota, gpu_deserved="10")
    html = response.content.decode()
    # The editor (swapped into the cell) and, out of band, the grid's head with the new figures.
    assert html.lstrip().startswith('<div class="quota-editor"')
    assert '<template><thead id="quota-summary" hx-swap-oob="true">' in html
    rows, marked = summary_of(html)
    assert rows["Departments' deserved GPUs (Σ)"] == ["0", "10"]
    assert rows["Over-subscription (Σ deserved / ready)"] == ["0", "1.25 over-subscribed"]
    assert marked == ["a100"]
    assert ("Warning: Departments now have 10 GPUs deserved in a100, above its 8 ready GPUs (of 8): "
            "over-subscription ratio 1.25.") in text(html)

    # "Close" refetches the grid region (the cell and the head), which still shows the new ratio.
    close = re.search(r'<a href="([^"]+)" class="cancel" hx-get="([^"]+)" hx-target="#table"', html)
    assert close and close.group(2) == grid
    region = htmx(client, close.group(2)).content.decode()
    assert region.lstrip().startswith('<div id="table"')
    rows, marked = summary_of(region)
    assert rows["Over-subscription (Σ deserved / ready)"] == ["0", "1.25 over-subscribed"] and marked == ["a100"]


def test_opening_the_editor_or_a_refused_save_sends_no_summary(client, org, users):
    quota = org.quota(org.rnd, org.a100)
    login(client, users, "sysadmin")
    opened = htmx(client, reverse("quota-edit", args=[quota.pk]), target=f"quota-{quota.pk}").content.decode()
    assert "quota-summary" not in opened
    refused = editor_post(client, quota, gpu_deserved="-1").content.decode()
    assert "quota-summary" not in refused


def test_read_only_editor_can_be_closed(client, org, users):
    quota = org.quota(org.rnd_a, org.a100)
    login(client, users, "rnd_viewer")
    html = htmx(client, reverse("quota-edit", args=[quota.pk]), target=f"quota-{quota.pk}").content.decode()
    assert 'class="cancel" hx-get="%s"' % reverse("quota-grid", args=[org.cluster.pk]) in html


def test_warning_when_a_project_quota_is_set_below_what_it_runs(client, org, users):
    from projects import services

    services.quota_update(actor=None, quota=org.quota(org.rnd, org.a100), expected_version=None, gpu_deserved=8)
    services.quota_update(actor=None, quota=org.quota(org.rnd_a, org.a100), expected_version=None, gpu_deserved=8)
    org.run("train-1", org.rnd_a, "a100-1", gpus=4)
    org.run("train-2", org.rnd_a, "a100-2", gpus=2)
    quota = org.quota(org.rnd_a, org.a100)
    login(client, users, "rnd_admin")
    page = text(editor_post(client, quota, gpu_deserved="4").content.decode())
    assert "Saved: 4 deserved GPUs." in page
    assert ("Warning: rnd-a runs 6 GPUs in a100, above its deserved 4: 2 GPUs are over quota and may be "
            "preempted.") in page


# --- words for people: memory in GiB, limits said as amounts ------------------------------------------

def test_the_editor_asks_and_shows_memory_in_gib_and_stores_mib(client, org, users):
    quota = org.quota(org.rnd_a, org.a100)
    login(client, users, "sysadmin")
    page = text(editor_post(client, quota, memory_deserved_gib="1.5", memory_limit_gib="64").content.decode())
    assert "Saved:" in page
    quota.refresh_from_db()
    assert (quota.memory_deserved_mib, quota.memory_limit_mib) == (1536, 65536)  # stored as before: MiB
    html = client.get(reverse("quota-edit", args=[quota.pk]), HTTP_HX_REQUEST="true").content.decode()
    assert "Deserved CPU memory (GiB)" in html and "CPU memory limit (GiB)" in html and "MiB" not in html
    assert re.search(r'name="memory_deserved_gib" value="1\.5"', html)
    assert re.search(r'name="memory_limit_gib" value="64"', html)
    # Saving the values as shown changes nothing: GiB -> MiB -> GiB gives back what was stored.
    quota.memory_deserved_mib = 1500
    quota.save()
    quota.refresh_from_db()
    html = client.get(reverse("quota-edit", args=[quota.pk]), HTTP_HX_REQUEST="true").content.decode()
    shown = re.search(r'name="memory_deserved_gib" value="([0-9.]+)"', html).group(1)
    assert shown == "1.4648"
    editor_post(client, quota, memory_deserved_gib=shown, memory_limit_gib="64")
    quota.refresh_from_db()
    assert quota.memory_deserved_mib == 1500


def test_memory_refusals_name_the_gib_field(client, org, users):
    quota = org.quota(org.rnd_a, org.a100)
    login(client, users, "sysadmin")
    page = text(editor_post(client, quota, memory_deserved_gib="-1").content.decode())
    assert "Deserved CPU memory (GiB): Memory quota cannot be negative." in page
    quota.refresh_from_db()
    assert quota.version == 1


@pytest.mark.parametrize("values, said", [
    ({"gpu_deserved": "99999999999"}, "Deserved GPUs: Enter at most 1,000,000 GPUs."),
    ({"gpu_deserved": "1.2345"}, "Deserved GPUs: Enter at most 3 decimal places."),
    ({"cpu_limit": "1.00001"}, "CPU limit (cores): Enter at most 3 decimal places."),
    ({"memory_deserved_gib": "99999999999999999999"}, "Deserved CPU memory (GiB): Enter at most 1,000,000,000 GiB."),
    ({"over_quota_weight": "99999999999999999999"}, "Over-quota weight: Enter at most 1,000,000."),
])
def test_limits_are_said_as_amounts_not_digits(client, org, users, values, said):
    quota = org.quota(org.rnd_a, org.a100)
    login(client, users, "sysadmin")
    page = text(editor_post(client, quota, **values).content.decode())
    assert said in page
    assert "digits in total" not in page and "9223372036854775807" not in page and "Ensure" not in page
    quota.refresh_from_db()
    assert quota.version == 1
