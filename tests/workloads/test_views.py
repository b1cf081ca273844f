"""The platform pages as each role sees them: the pool page's Platforms section, a pool's platforms
with resources per node, a platform's nodes and merged template, the lists and their CSV; and the
forms (only system administrators), with bad input answered on the field and nothing stored."""
from __future__ import annotations

from html import unescape

import pytest
from django.urls import reverse

from tests.pages import ROLES, csv_of, first_column, login, page_text, table_rows
from workloads.models import Platform, PodTemplate, PoolWorkloadSettings, ResourceValidationRuleSet

pytestmark = pytest.mark.django_db


@pytest.fixture(scope="module")
def kept(kept_db):
    """The heterogeneous pool and the logins, built once for the module (`kept_db`: each test's writes are
    rolled back)."""
    from nodepools import services as pool_services
    from tests.conftest import Org, role_users
    from tests.workloads.conftest import Hetero

    with kept_db.unblock():
        org = Org(pool_services.cluster_create(actor=None, name="lab"))
        return Hetero(org), role_users(org)


@pytest.fixture
def hetero(kept):
    return kept[0]


@pytest.fixture
def users(kept):
    return kept[1]

# Everybody with a role somewhere in the cluster reads its pools, and so their platforms.
SEERS = {"sysadmin", "rnd_admin", "rnd_viewer", "proj_admin", "researcher", "cluster_viewer"}


@pytest.mark.parametrize("role", ROLES)
def test_pool_page_lists_its_platforms_per_role(client, hetero, users, role):
    login(client, users, role)
    response = client.get(reverse("pool-detail", args=[hetero.pool.pk]))
    if role not in SEERS:
        assert response.status_code == 404
        return
    assert response.status_code == 200
    rows = table_rows(response, "pool-platforms-table")
    assert [row[0] for row in rows] == ["a100-platform", "l40s-platform default"]
    a100 = rows[0]
    assert a100[1:5] == ["nvidia.com/gpu.product=NVIDIA-A100", "2", "10", "4"]
    assert ("Add platform" in page_text(response)) == (role == "sysadmin")


@pytest.mark.parametrize("role", ROLES)
def test_pool_platforms_page_shows_resources_per_node(client, hetero, users, role):
    login(client, users, role)
    response = client.get(reverse("pool-platforms", args=[hetero.pool.pk]))
    if role not in SEERS:
        assert response.status_code == 404
        return
    assert response.status_code == 200
    rows = {row[0]: row for row in table_rows(response, "resources")}
    assert set(rows) == {"a100-big", "a100-small", "l40s-1"}
    node, pool, platform, cpu, memory, gpu, storage = rows["a100-big"]
    assert (pool, platform, gpu) == ("hetero", "a100-platform", "6 / 8")
    assert cpu.endswith("/ 64") and memory.endswith("/ 512")
    assert rows["l40s-1"][2] == "l40s-platform" and rows["l40s-1"][5] == "0 / 4"
    text = page_text(response)
    assert "Common pod templates default_user" in text
    assert "Resource validation default_cpu default_memory" in text
    assert ("Edit workload settings" in text) == (role == "sysadmin")


def test_platform_page_shows_its_nodes_the_excluded_ones_and_the_merged_template(client, hetero, users):
    login(client, users, "researcher")
    response = client.get(reverse("platform-detail", args=[hetero.a100_platform.pk]))
    assert response.status_code == 200
    assert first_column(response, "platform-nodes") == ["a100-big", "a100-small"]
    text = page_text(response)
    assert "l40s-1: labels do not match nvidia.com/gpu.product=NVIDIA-A100" in text
    assert "Templates, in merge order default_user → a100" in text
    merged = unescape(response.content.decode().split('id="merged-template">', 1)[1].split("</pre>", 1)[0])
    assert "nodeSelector:\n    nvidia.com/gpu.product: NVIDIA-A100" in merged
    assert "- name: <WF_TASK_NAME>" in merged
    # The pool's default USER_CPU (2) and USER_MEMORY (8Gi) are substituted.
    assert "cpu: '2'\n        memory: 8Gi" in merged
    assert "Delete…" not in text  # a researcher reads, never changes


@pytest.mark.parametrize("role", ROLES)
def test_platform_list_and_csv_per_role(client, hetero, users, role):
    login(client, users, role)
    response = client.get(reverse("platform-list"), {"sort": "name"})
    assert response.status_code == 200
    expected = ["a100-platform", "l40s-platform"] if role in SEERS else []
    assert first_column(response) == expected
    download = csv_of(client.get(reverse("platform-list"), {"sort": "name", "format": "csv"}))
    assert [row[0] for row in download[1:]] == expected
    if expected:
        header = download[0]
        a100 = dict(zip(header, download[1]))
        assert (a100["Nodes"], a100["Total GPUs"], a100["Free GPUs"]) == ("2", "10", "4")


@pytest.mark.parametrize("role", ROLES)
def test_configuration_forms_are_for_system_administrators(client, hetero, users, role):
    login(client, users, role)
    pages = [reverse("platform-create", args=[hetero.pool.pk]), reverse("platform-edit", args=[hetero.a100_platform.pk]),
             reverse("pool-workload-settings", args=[hetero.pool.pk]), reverse("podtemplate-edit", args=[hetero.a100.pk]),
             f"{reverse('podtemplate-create')}?cluster={hetero.org.cluster.pk}"]
    for url in pages:
        status = client.get(url).status_code
        if role == "sysadmin":
            assert status == 200, url
        else:
            assert status in (403, 404), url
    # Nothing changes through a POST either.
    client.post(reverse("platform-create", args=[hetero.pool.pk]), {"name": "sneaky"})
    assert Platform.objects.filter(name="sneaky").exists() == (role == "sysadmin")


def test_add_platform_through_the_form(client, hetero, users):
    login(client, users, "sysadmin")
    response = client.post(reverse("platform-create", args=[hetero.pool.pk]), {
        "name": "a100-big-only", "description": "Only the big A100 node",
        "node_selector": "nvidia.com/gpu.product: NVIDIA-A100\nkubernetes.io/hostname: a100-big\n",
        "tolerations": "- key: nvidia.com/gpu.product\n  operator: Exists\n  effect: NoSchedule\n",
        "allowed_mounts": "/data\n/scratch\n", "override_templates": "a100", "rule_sets": "default_gpu",
        "default_variables": "USER_GPU: 1", "host_network_allowed": "on", "pod_security_level": "privileged",
    })
    platform = Platform.objects.get(name="a100-big-only")
    assert response.status_code == 302 and response.url == reverse("platform-detail", args=[platform.pk])
    assert platform.node_selector == {"nvidia.com/gpu.product": "NVIDIA-A100", "kubernetes.io/hostname": "a100-big"}
    assert platform.allowed_mounts == ["/data", "/scratch"] and platform.host_network_allowed
    assert [t.name for t in platform.ordered_templates()] == ["a100"]
    page = client.get(response.url)
    assert first_column(page, "platform-nodes") == ["a100-big"]


def test_malformed_platform_input_is_answered_on_the_field_and_nothing_stored(client, hetero, users):
    login(client, users, "sysadmin")
    response = client.post(reverse("platform-create", args=[hetero.pool.pk]), {
        "name": "broken", "tolerations": "- key: a\n  operator: Maybe\n", "override_templates": "a100"})
    assert response.status_code == 200
    assert "Tolerations: tolerations[0].operator: Unsupported value: 'Maybe'" in page_text(response)
    response = client.post(reverse("platform-create", args=[hetero.pool.pk]), {
        "name": "broken", "override_templates": "a100\nmissing_template"})
    assert "Override pod templates: No pod template named 'missing_template' in this cluster." in page_text(response)
    assert not Platform.objects.filter(name="broken").exists()


def test_malformed_pod_template_is_refused_with_the_line(client, hetero, users):
    login(client, users, "sysadmin")
    url = f"{reverse('podtemplate-create')}?cluster={hetero.org.cluster.pk}"
    response = client.post(url, {"name": "h100", "body": "spec:\n  nodeSelector:\n    a: b\n   bad: indent\n"})
    assert response.status_code == 200
    assert "Template: Not valid JSON or YAML at line 4" in page_text(response)
    assert not PodTemplate.objects.filter(name="h100").exists()
    response = client.post(url, {"name": "h100", "body": "spec:\n  nodeSelector:\n    nvidia.com/gpu.product: NVIDIA-H100\n"})
    assert response.status_code == 302
    detail = client.get(response.url)
    assert "nvidia.com/gpu.product: NVIDIA-H100" in page_text(detail)


def test_edit_pod_template_made_stale_by_someone_else_is_refused(client, hetero, users):
    login(client, users, "sysadmin")
    url = reverse("podtemplate-edit", args=[hetero.a100.pk])
    from workloads import services
    services.pod_template_update(actor=None, template=hetero.a100, description="changed meanwhile")
    response = client.post(url, {"name": "a100", "body": "spec: {}", "version": "1"})
    assert response.status_code == 200
    assert "changed by someone else meanwhile" in page_text(response)
    assert PodTemplate.objects.get(pk=hetero.a100.pk).body["spec"]["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-A100"}


def test_rule_set_form_names_the_bad_rule(client, hetero, users):
    login(client, users, "sysadmin")
    url = f"{reverse('ruleset-create')}?cluster={hetero.org.cluster.pk}"
    response = client.post(url, {"name": "max_gpu", "rules": "- operator: LE\n  left_operand: '{{USER_GPU}}'\n  right_operand: 8 GPUs\n"})
    assert "Rules: rules[0].right_operand: '8 GPUs' is neither a variable" in page_text(response)
    assert not ResourceValidationRuleSet.objects.filter(name="max_gpu").exists()
    response = client.post(url, {"name": "max_gpu", "rules": "- operator: LE\n  left_operand: '{{USER_GPU}}'\n  right_operand: '8'\n"
                                                           "  assert_message: at most 8 GPUs\n"})
    assert response.status_code == 302
    assert table_rows(client.get(response.url), "rules") == [["{{USER_GPU}}", "LE", "8", "at most 8 GPUs"]]


def test_pool_settings_form_sets_default_platform_and_lists(client, hetero, users):
    login(client, users, "sysadmin")
    version = PoolWorkloadSettings.objects.get(pool=hetero.pool).version
    response = client.post(reverse("pool-workload-settings", args=[hetero.pool.pk]), {
        "default_platform": "a100-platform", "default_variables": "USER_MEMORY: 16Gi",
        "common_templates": "default_user", "rule_sets": "default_cpu\ndefault_storage", "version": str(version)})
    assert response.status_code == 302, page_text(response)
    page = client.get(response.url)
    text = page_text(page)
    assert "Default platform a100-platform" in text and "USER_MEMORY=16Gi" in text
    assert "Resource validation default_cpu default_storage" in text
