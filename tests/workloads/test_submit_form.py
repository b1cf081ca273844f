"""The submission page's form: the pools an ordered choice of those open to the project (its priority
list first), the platform a choice of the first pool's platforms, and each field checked as it is filled
(POST /workloads/submit/check/?field=…) by the same form and the same steps as Preview; without
JavaScript the same page works with plain posts."""
from __future__ import annotations

import re
from html import unescape

import pytest
from django.urls import reverse

pytestmark = pytest.mark.django_db


def options(html: str, select_id: str) -> list[tuple[str, str, bool]]:
    """(value, text, selected) of a select's options."""
    select = re.search(rf'<select[^>]*id="{select_id}"[^>]*>(.*?)</select>', html, re.S).group(1)
    return [(v, re.sub(r"\s+", " ", t).strip(), bool(sel)) for v, sel, t in
            re.findall(r'<option value="([^"]*)"( selected)?>(.*?)</option>', select, re.S)]


def errors(html: str) -> list[str]:
    return [unescape(re.sub(r"<[^>]+>", "", e)).strip() for e in re.findall(r'<p class="error"[^>]*>(.*?)</p>', html, re.S)]


@pytest.fixture
def form_data(hetero):
    org = hetero.org
    return {"project": org.rnd_a.pk, "pools_for": org.rnd_a.pk, "pools_0": "hetero", "pools_1": "", "pools_2": "",
            "platform": "a100-platform", "image": "nvcr.io/nvidia/pytorch:24.05-py3", "command": "", "cpu": "",
            "memory": "", "gpus": "0", "storage": "", "priority_class": "train", "pods": "1", "name": ""}


def check(client, field, data):
    return client.post(reverse("workload-submit-check") + f"?field={field}", data)


def test_pools_are_offered_in_the_projects_order_and_only_those_open_to_it(client, hetero, users):
    from nodepools import services as pool_services
    from projects import services as project_services
    from workloads.submission import pool_access_set

    org = hetero.org
    project_services.project_priority_set(actor=None, project=org.rnd_a, pools=[hetero.pool, org.a100])
    closed = pool_services.pool_create(actor=None, cluster=org.cluster, name="ops-only", label_key="pool",
                                       label_value="ops-only")
    pool_access_set(actor=None, pool=closed, open_to_cluster=False, maintenance=False, departments=[org.ops])
    client.force_login(users["researcher"])
    html = client.get(reverse("workload-submit")).content.decode()
    pools = options(html, "id_pools_0")
    assert [v for v, _, _ in pools] == ["", "hetero", "a100", "default"]  # never ops-only
    chosen = [[v for v, _, sel in options(html, f"id_pools_{i}") if sel] for i in range(3)]
    assert chosen == [["hetero"], ["a100"], ["default"]]  # the priority list, then default
    assert [t for _, t, _ in options(html, "id_platform")] == [
        "l40s-platform: the default platform of hetero", "a100-platform", "l40s-platform"]
    # The department's administrator of ops sees ops-only offered to ops-a.
    client.force_login(users["sysadmin"])
    html = client.get(reverse("workload-submit"), {"project": org.ops_a.pk}).content.decode()
    assert "ops-only" in [v for v, _, _ in options(html, "id_pools_0")]


def test_the_platforms_follow_the_pools(client, hetero, users, form_data):
    client.force_login(users["researcher"])
    html = check(client, "placement", {**form_data, "pools_0": "a100", "platform": ""}).content.decode()
    assert html.lstrip().startswith('<div id="placement"')
    assert [t for _, t, _ in options(html, "id_platform")] == ["none: a100 has no platforms (any of its nodes)"]
    html = check(client, "placement", {**form_data, "pools_0": "hetero", "pools_1": "a100"}).content.decode()
    assert [v for v, _, sel in options(html, "id_platform") if sel] == ["a100-platform"]
    assert errors(html) == []


def test_a_field_is_checked_with_previews_rules_as_it_is_filled(client, hetero, users, form_data):
    client.force_login(users["researcher"])
    # No node of the A100 platform has 4 free GPUs: the resource validation step, said at the field.
    html = check(client, "gpus", {**form_data, "gpus": "4"}).content.decode()
    assert html.lstrip().startswith('<div class="field has-error" id="field-gpus"')
    assert any(e.startswith("GPUs: ") and "GPU 4 exceeds node capacity" in e for e in errors(html)), errors(html)
    # In words first (asked, the pool, what each node has free), then the pool's rule for its administrator.
    assert errors(html) == ["GPUs: 4 GPUs requested: no node of pool hetero has that many free. The most free on one "
                            "node is 2 GPUs, of its 8; free per node now: a100-big 2 of 8, a100-small 2 of 2. The "
                            "pool's rule: GPU 4 exceeds node capacity 2 (a100-big: K8_GPU 2 < USER_GPU 4; "
                            "a100-small: K8_GPU 2 < USER_GPU 4)."]
    assert check(client, "gpus", {**form_data, "gpus": "2"}).content.decode().count('class="error"') == 0
    # The same refusal is not another resource field's: memory checked while GPUs are still 4 is fine.
    assert errors(check(client, "memory", {**form_data, "gpus": "4", "memory": "8Gi"}).content.decode()) == []
    # A quantity that is none: the submission's own words; another field's error is not this field's.
    html = check(client, "memory", {**form_data, "memory": "lots", "image": ""}).content.decode()
    assert errors(html) == ["Memory: 'lots' is not a Kubernetes quantity (e.g. 500m, 2, 1Gi, 512Mi)."]
    html = check(client, "image", {**form_data, "image": "has spaces in it"}).content.decode()
    assert errors(html) == ["Image: 'has spaces in it' is not an image reference: invalid reference format (e.g. "
                            "nvcr.io/nvidia/pytorch:24.05-py3, busybox:1.36, registry.example.com:5000/team/train@sha256:…)."]
    # The pools: twice the same pool, or one that is not open to the project.
    html = check(client, "placement", {**form_data, "pools_1": "hetero"}).content.decode()
    assert errors(html) == ["Node pools: A pool appears twice in the list."]
    html = check(client, "placement", {**form_data, "pools_0": "nowhere"}).content.decode()
    assert errors(html) == ["Node pools: No node pool named nowhere in cluster lab."]
    # Unknown field names are refused.
    assert check(client, "nonsense", form_data).status_code == 400


def test_without_javascript_the_choices_follow_a_plain_post(client, hetero, users, form_data):
    from projects import services as project_services

    org = hetero.org
    project_services.project_priority_set(actor=None, project=org.rnd_b, pools=[org.a100])
    client.force_login(users["rnd_admin"])
    # Another project chosen: its pools start again from its priority list; nothing is checked yet.
    html = client.post(reverse("workload-submit"), {**form_data, "project": org.rnd_b.pk, "image": "",
                                                     "action": "refresh"}).content.decode()
    assert [[v for v, _, sel in options(html, f"id_pools_{i}") if sel] for i in range(2)] == [["a100"], ["default"]]
    assert errors(html) == [] and 'id="job-yaml"' not in html
    assert "Show the pools and platforms of these choices" in html  # the button, inside <noscript>
    # Preview with plain posts: the pools chosen in order, the platform chosen.
    html = client.post(reverse("workload-submit"), {**form_data, "action": "preview"}).content.decode()
    assert 'id="job-yaml"' in html and "Pools in order: hetero; platform a100-platform." in html
