"""The blueprint on the pool page, and NodePools created, edited and deleted from the console, against
the emulator over HTTP (the console writes through the official client; the sync brings the writes back)."""
from __future__ import annotations

import html as htmllib
import re

import pytest
from django.urls import reverse

from access.rules import Role
from audit.models import AuditEvent
from nodepools import services as pool_services
from nodepools.models import NodePool
from projects import services as project_services
from provisioning.forms import NodePoolForm
from provisioning.examples import example_spec
from provisioning.models import KarpenterNodePool
from tests.conftest import make_user

from .conftest import NODEPOOLS, add_nodeclaim, add_nodepool, condition, nodepool_status


def text(html: str) -> str:
    return htmllib.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html)).strip())


def section(html: str, element_id: str) -> str:
    match = re.search(rf'id="{element_id}"[^>]*>(.*?)</(table|section|dl|ul|dd|p)>', html, re.S)
    assert match, f"no #{element_id} on the page"
    return text(match.group(1))


@pytest.fixture
def people(lab):
    made = {name: make_user(name) for name in ("sysadmin", "rnd-viewer", "researcher", "outsider")}
    project_services.role_assign(actor=None, role=Role.SYSTEM_ADMIN, user=made["sysadmin"])
    project_services.role_assign(actor=None, role=Role.DEPARTMENT_VIEWER, user=made["rnd-viewer"], department=lab.rnd)
    project_services.role_assign(actor=None, role=Role.RESEARCHER, user=made["researcher"], project=lab.rnd_a)
    return made


def backed_pool(lab, name="a100-standard", **kw):
    return pool_services.pool_create(actor=None, cluster=lab.cluster, name=name, label_key="karpenter.sh/nodepool",
                                     label_value=name, **kw)


def form_data(spec, **changes):
    data = {k: ("" if v is None else v) for k, v in NodePoolForm.initial_from(spec).items()}
    data.update(changes)
    return data


# ------------------------------------------------------------------------------------------- the blueprint

def test_the_pool_page_shows_the_blueprint_to_each_role_that_sees_the_pool(lab, people, client):
    add_nodepool(lab.emu, "a100-standard", status=nodepool_status(gpus="40", cpu="192", nodes=5))
    lab.emu.update(NODEPOOLS, "a100-standard", lambda o: {**o, "status": {**o["status"], "conditions": [
        condition("ValidationSucceeded"), condition("NodeClassReady", "False", "NodeClassNotReady", "EC2NodeClass not found"),
        condition("Ready", "False", "NodeClassNotReady")]}}, subresource="status")
    add_nodeclaim(lab.emu, "a100-standard-7xk", "a100-standard", conditions=["Launched"])
    add_nodeclaim(lab.emu, "a100-standard-2pq", "a100-standard",
                  conditions=["Launched", "Registered", "Initialized", "Drifted"], node_name="ip-10-1-2-3")
    pool = backed_pool(lab)
    lab.start().synced()

    for who in ("sysadmin", "rnd-viewer", "researcher"):
        client.force_login(people[who])
        html = client.get(reverse("pool-detail", args=[pool.pk])).content.decode()
        assert "Karpenter NodePool a100-standard" in text(html), who
        requirements = section(html, "blueprint-requirements")
        assert "Instance family is one of p4d, p4de" in requirements
        assert "Capacity type is on-demand" in requirements and "Zone is one of us-east-1a, us-east-1b" in requirements
        assert "nvidia.com/gpu=true:NoSchedule" in section(html, "blueprint-taints")
        limits = section(html, "blueprint-limits")
        assert "nvidia.com/gpu 40 40 limit reached: Karpenter launches no more" in limits
        # In human units (cores, GiB / TiB), never the cluster's raw quantities.
        assert "cpu 192 cores 960 cores" in limits and "memory 0 B 8 TiB" in limits
        assert "WhenEmptyOrUnderutilized" in section(html, "blueprint-disruption")
        assert "At most 10% of the nodes disrupted at once, for any reason" in section(html, "blueprint-budgets")
        conditions = section(html, "blueprint-conditions")
        assert "NodeClassReady False NodeClassNotReady EC2NodeClass not found" in conditions
        assert "ValidationSucceeded True" in conditions
        claims = section(html, "blueprint-nodeclaims")
        assert "a100-standard-7xk Launched p4d.24xlarge on-demand us-east-1a 8" in claims
        assert "a100-standard-2pq Drifted" in claims and "ip-10-1-2-3" in claims
        edit = reverse("provisioning-nodepool-edit", args=[pool.pk])
        assert (edit in html) == (who == "sysadmin"), who

        api = client.get(reverse("api:pool-provisioning", args=[pool.pk])).json()
        assert api["backed_by"] == "a100-standard" and api["nodepool"]["gpu_limit"] == 40, who
        assert {c["name"]: c["phase"] for c in api["nodeclaims"]} == {
            "a100-standard-7xk": "Launched", "a100-standard-2pq": "Drifted"}, who

    client.force_login(people["outsider"])
    assert client.get(reverse("pool-detail", args=[pool.pk])).status_code == 404
    assert client.get(reverse("api:pool-provisioning", args=[pool.pk])).status_code == 404
    for who in ("rnd-viewer", "researcher"):
        client.force_login(people[who])
        assert client.get(reverse("provisioning-nodepool-edit", args=[pool.pk])).status_code == 403
        assert client.post(reverse("provisioning-pool-create"), {}).status_code == 403


def test_a_pool_whose_nodepool_is_missing_says_so(lab, people, client):
    pool = backed_pool(lab, "h100-prod")
    lab.start().synced()
    client.force_login(people["sysadmin"])
    html = client.get(reverse("pool-detail", args=[pool.pk])).content.decode()
    assert "The cluster has no Karpenter NodePool named h100-prod" in section(html, "nodepool-missing")


# ---------------------------------------------------------------------------------- create / edit / delete

def test_creating_a_karpenter_backed_pool_from_an_example_creates_its_nodepool(lab, people, client):
    client.force_login(people["sysadmin"])
    page = client.get(reverse("provisioning-pool-create") + "?example=h100-prod").content.decode()
    for example in ("h100-prod", "a100-standard", "t4-best-effort", "spot-only", "inference-only"):
        assert f"?example={example}" in page
    assert "WhenEmpty" in page and "on-demand,reserved" in page
    data = form_data(example_spec("h100-prod"), name="h100-prod", cluster=lab.cluster.pk)
    response = client.post(reverse("provisioning-pool-create"), data)
    assert response.status_code == 302, text(response.content.decode())[:2000]

    obj = lab.emu.get(NODEPOOLS, "h100-prod")
    assert obj["spec"]["weight"] == 90 and obj["spec"]["disruption"]["consolidationPolicy"] == "WhenEmpty"
    assert obj["spec"]["limits"]["nvidia.com/gpu"] == "64"
    assert {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand", "reserved"]} in \
        obj["spec"]["template"]["spec"]["requirements"]
    assert obj["metadata"]["managedFields"][0]["manager"] == "gpu-capacity-console"
    pool = NodePool.objects.get(name="h100-prod")
    assert (pool.label_key, pool.label_value, pool.gpu_limit) == ("karpenter.sh/nodepool", "h100-prod", 64)
    assert AuditEvent.objects.filter(object_type="karpenternodepool", object_id="nodepool/h100-prod",
                                     action=AuditEvent.Action.CREATE, actor=people["sysadmin"]).exists()
    lab.start().synced()
    lab.until(lambda: KarpenterNodePool.objects.filter(name="h100-prod", gpu_limit=64).exists())
    html = client.get(reverse("pool-detail", args=[pool.pk])).content.decode()
    assert section(html, "blueprint-budgets") == (
        "No node disrupted, for any reason, during 8h from each '0 9 * * mon-fri' (UTC) "
        "At most 1 node disrupted at once, for any reason")
    assert "WhenEmpty (only empty nodes are consolidated; busy nodes never) , after 30m" in section(
        html, "blueprint-disruption")
    assert section(html, "blueprint-expire") == "never (nodes are not replaced for age)"


def test_an_edit_is_written_and_a_concurrent_change_is_reported_not_overwritten(lab, people, client):
    add_nodepool(lab.emu, "t4-best-effort", "t4-best-effort")
    pool = backed_pool(lab, "t4-best-effort", gpu_limit=32)
    client.force_login(people["sysadmin"])
    url = reverse("provisioning-nodepool-edit", args=[pool.pk])
    page = client.get(url).content.decode()
    version = re.search(r'name="resource_version" value="([^"]+)"', page).group(1)
    data = form_data(lab.emu.get(NODEPOOLS, "t4-best-effort")["spec"], resource_version=version, weight="20",
                     limit_gpu="48")
    # Someone changes the NodePool in the cluster after the form was read.
    lab.emu.update(NODEPOOLS, "t4-best-effort", {"spec": {"weight": 15}}, patch_type="merge")
    response = client.post(url, data)
    assert response.status_code == 200
    assert "was changed in the cluster since you opened it: nothing was written" in section(
        response.content.decode(), "nodepool-conflict")
    assert lab.emu.get(NODEPOOLS, "t4-best-effort")["spec"]["weight"] == 15
    assert NodePool.objects.get(pk=pool.pk).gpu_limit == 32

    # Reloaded, the same change goes through; the pool's GPU limit follows the NodePool's.
    page = client.get(url).content.decode()
    version = re.search(r'name="resource_version" value="([^"]+)"', page).group(1)
    response = client.post(url, {**data, "resource_version": version})
    assert response.status_code == 302
    spec = lab.emu.get(NODEPOOLS, "t4-best-effort")["spec"]
    assert spec["weight"] == 20 and spec["limits"]["nvidia.com/gpu"] == "48"
    assert NodePool.objects.get(pk=pool.pk).gpu_limit == 48
    assert AuditEvent.objects.filter(object_id="nodepool/t4-best-effort", action=AuditEvent.Action.UPDATE).exists()


def test_an_edit_the_crds_transition_rules_refuse_is_reported_before_anything_is_sent(lab, people, client):
    # Karpenter's CRD: a NodePool's nodeClassRef may name another NodeClass, not another kind or group
    # (CEL `self.kind == oldSelf.kind`), so the form compares with the NodePool it read.
    add_nodepool(lab.emu, "t4-best-effort", "t4-best-effort")
    pool = backed_pool(lab, "t4-best-effort")
    client.force_login(people["sysadmin"])
    url = reverse("provisioning-nodepool-edit", args=[pool.pk])
    page = client.get(url).content.decode()
    version = re.search(r'name="resource_version" value="([^"]+)"', page).group(1)
    spec = lab.emu.get(NODEPOOLS, "t4-best-effort")["spec"]
    lab.emu.reset_access_log()
    response = client.post(url, form_data(spec, resource_version=version, node_class_kind="AKSNodeClass"))
    assert response.status_code == 200
    errors = text(re.search(r'<div class="errors" role="alert">(.*?)</div>', response.content.decode(), re.S).group(1))
    assert errors == 'spec.template.spec.nodeClassRef: Invalid value: "object": nodeClassRef.kind is immutable'
    assert not [a for a in lab.emu.access_log() if a["resource"] == "nodepools" and a["verb"] in ("update", "patch")]
    assert lab.emu.get(NODEPOOLS, "t4-best-effort")["spec"]["template"]["spec"]["nodeClassRef"]["kind"] == "EC2NodeClass"
    # Another NodeClass of the same kind is fine.
    response = client.post(url, form_data(spec, resource_version=version, node_class_name="gpu-class"))
    assert response.status_code == 302
    assert lab.emu.get(NODEPOOLS, "t4-best-effort")["spec"]["template"]["spec"]["nodeClassRef"]["name"] == "gpu-class"


def test_deleting_a_backed_pool_asks_whether_the_nodepool_goes_too(lab, people, client):
    add_nodepool(lab.emu, "spot-only", "spot-only")
    add_nodepool(lab.emu, "a100-standard")
    spot, a100 = backed_pool(lab, "spot-only"), backed_pool(lab)
    lab.start().synced()
    client.force_login(people["sysadmin"])
    plain = client.get(reverse("pool-delete", args=[spot.pk])).content.decode()
    assert "Deleting the pool here keeps the NodePool" in section(plain, "karpenter-delete-notice")
    page = client.get(reverse("provisioning-pool-delete", args=[spot.pk])).content.decode()
    assert "drained (its pods evicted, respecting PodDisruptionBudgets) and its instance terminated" in text(page)

    response = client.post(reverse("provisioning-pool-delete", args=[spot.pk]), {"nodepool": "delete", "confirm": "on"})
    assert response.status_code == 302
    assert lab.emu.get(NODEPOOLS, "spot-only") is None and not NodePool.objects.filter(pk=spot.pk).exists()
    assert AuditEvent.objects.filter(object_id="nodepool/spot-only", action=AuditEvent.Action.DELETE).exists()

    response = client.post(reverse("provisioning-pool-delete", args=[a100.pk]), {"nodepool": "keep", "confirm": "on"})
    assert response.status_code == 302
    assert lab.emu.get(NODEPOOLS, "a100-standard") is not None and not NodePool.objects.filter(pk=a100.pk).exists()


def test_deleting_with_the_nodepool_changed_meanwhile_is_reported_and_keeps_both(lab, people, client):
    add_nodepool(lab.emu, "spot-only", "spot-only")
    pool = backed_pool(lab, "spot-only")
    lab.start().synced()
    client.force_login(people["sysadmin"])
    page = client.get(reverse("provisioning-pool-delete", args=[pool.pk])).content.decode()
    version = re.search(r'name="resource_version" value="([^"]+)"', page).group(1)
    lab.emu.update(NODEPOOLS, "spot-only", {"spec": {"weight": 7}}, patch_type="merge")
    response = client.post(reverse("provisioning-pool-delete", args=[pool.pk]),
                           {"nodepool": "delete", "confirm": "on", "resource_version": version})
    assert "changed in the cluster since you opened it" in section(response.content.decode(), "nodepool-conflict")
    assert lab.emu.get(NODEPOOLS, "spot-only") is not None and NodePool.objects.filter(pk=pool.pk).exists()


# ------------------------------------------------------------------------------------------- validation

# The CRD's own words, as the API server says them (kube/crds/karpenter.sh_nodepools.yaml: its OpenAPI schema
# in kube-openapi's messages, its CEL rules' messages, on the node that carries the rule: a rule over the
# requirements or the budgets names the list), then the console's policy (restricted label domains, label
# values, values with Exists, negative limits).
RULES = [
    ({"weight": "0"}, "weight", "spec.weight", "Invalid value: 0: spec.weight in body should be greater than or equal to 1"),
    ({"weight": "101"}, "weight", "spec.weight", "Invalid value: 101: spec.weight in body should be less than or equal to 100"),
    ({"requirements": "karpenter.sh/capacity-type Maybe spot"}, "requirements",
     "spec.template.spec.requirements[0].operator", 'Unsupported value: "Maybe": supported values: "In", "NotIn"'),
    ({"requirements": "karpenter.sh/capacity-type In"}, "requirements",
     "spec.template.spec.requirements", "requirements with operator 'In' must have a value defined"),
    ({"requirements": "karpenter.k8s.aws/instance-gpu-count Gt two"}, "requirements",
     "spec.template.spec.requirements", "type conversion error from 'string' to 'int' evaluating rule: requirements "
                                        "operator 'Gt', 'Lt', 'Gte', or 'Lte' must have a single positive integer value"),
    ({"requirements": "kubernetes.io/arch Exists amd64"}, "requirements",
     "spec.template.spec.requirements[0].values", "must not have values"),
    ({"requirements": "Bad_Key! In x"}, "requirements", "spec.template.spec.requirements[0].key", "Invalid value"),
    ({"requirements": "karpenter.sh/nodepool In x"}, "requirements", "spec.template.spec.requirements[0].key",
     'label "karpenter.sh/nodepool" is restricted'),
    ({"requirements": "kubernetes.io/hostname In n1"}, "requirements", "spec.template.spec.requirements[0].key",
     'label "kubernetes.io/hostname" is restricted'),
    ({"requirements": "example.kubernetes.io/team In ml"}, "requirements", "spec.template.spec.requirements[0].key",
     'label domain "kubernetes.io" is restricted'),
    ({"requirements": "example.com/team In ml_"}, "requirements", "spec.template.spec.requirements[0].values[0]",
     "Invalid value: 'ml_'"),
    ({"requirements": "node.kubernetes.io/instance-type In p5.48xlarge,p4d.24xlarge minValues=3"}, "requirements",
     "spec.template.spec.requirements", "requirements with 'minValues' must have at least that many values specified "
                                        "in the 'values' field"),
    ({"requirements": "\n".join(f"example.com/k{i} Exists" for i in range(101))}, "requirements",
     "spec.template.spec.requirements", "Too many: 101: must have at most 100 items"),
    ({"taints": "nvidia.com/gpu=true:NoDrain"}, "taints", "spec.template.spec.taints[0].effect",
     'Unsupported value: "NoDrain": supported values: "NoSchedule", "PreferNoSchedule", "NoExecute"'),
    ({"startup_taints": "-bad-:NoSchedule"}, "startup_taints", "spec.template.spec.startupTaints[0].key",
     'Invalid value: "-bad-": spec.template.spec.startupTaints[0].key in body should match'),
    ({"labels": "gpu-tier=no spaces allowed"}, "labels", "spec.template.metadata.labels[gpu-tier]",
     'Invalid value: "no spaces allowed": spec.template.metadata.labels.gpu-tier in body should match'),
    ({"labels": "karpenter.sh/team=ml"}, "labels", "spec.template.metadata.labels",
     'Invalid value: "object": label domain "karpenter.sh" is restricted'),
    ({"limit_gpu": "lots"}, "limit_gpu", "spec.limits[nvidia.com/gpu]",
     'Invalid value: "lots": spec.limits.nvidia.com/gpu in body should match'),
    ({"limit_memory": "-8Ti"}, "limit_memory", "spec.limits[memory]", "greater than or equal to 0"),
    ({"consolidation_policy": "Sometimes"}, "consolidation_policy", None, "Select a valid choice"),
    ({"consolidate_after": "5 minutes"}, "consolidate_after", "spec.disruption.consolidateAfter",
     "spec.disruption.consolidateAfter in body should match '^(([0-9]+(s|m|h))+|Never)$'"),
    ({"expire_after": "30d"}, "expire_after", "spec.template.spec.expireAfter",
     "spec.template.spec.expireAfter in body should match '^(([0-9]+(s|m|h))+|Never)$'"),
    ({"termination_grace_period": "Never"}, "termination_grace_period", "spec.template.spec.terminationGracePeriod",
     "spec.template.spec.terminationGracePeriod in body should match '^([0-9]+(s|m|h))+$'"),
    ({"budgets": "ten"}, "budgets", "spec.disruption.budgets[0].nodes",
     "spec.disruption.budgets[0].nodes in body should match '^((100|[0-9]{1,2})%|[0-9]+)$'"),
    ({"budgets": "120%"}, "budgets", "spec.disruption.budgets[0].nodes", 'Invalid value: "120%"'),
    ({"budgets": "0 | 0 9 * * mon-fri"}, "budgets", "spec.disruption.budgets",
     "'schedule' must be set with 'duration'"),
    ({"budgets": "1 | every day | 8h"}, "budgets", "spec.disruption.budgets[0].schedule",
     'Invalid value: "every day": spec.disruption.budgets[0].schedule in body should match'),
    ({"budgets": "1 | @daily | 90s"}, "budgets", "spec.disruption.budgets[0].duration",
     "spec.disruption.budgets[0].duration in body should match '^((([0-9]+(h|m))|([0-9]+h[0-9]+m))(0s)?)$'"),
    ({"budgets": "1 | | | Idle"}, "budgets", "spec.disruption.budgets[0].reasons[0]",
     'Unsupported value: "Idle": supported values: "Underutilized", "Empty", "Drifted"'),
    ({"node_class_group": "karpenter.k8s.aws/v1"}, "node_class_group", "spec.template.spec.nodeClassRef.group",
     "spec.template.spec.nodeClassRef.group in body should match '^[^/]*$'"),
    ({"name": "H100_Prod"}, "name", "metadata.name", "RFC 1123"),
    # Issue 19: a NodeClass is an object of the cluster, named by the DNS-1123 subdomain rule; lists are bounded.
    ({"node_class_name": "../../etc"}, "node_class_name", "spec.template.spec.nodeClassRef.name",
     "Invalid value: '../../etc': a lowercase RFC 1123 subdomain"),
    ({"node_class_kind": "EC2NodeClass; drop"}, "node_class_kind", "spec.template.spec.nodeClassRef.kind",
     "a kind is letters and digits"),
    ({"requirements": "node.kubernetes.io/instance-type In " + ",".join(f"t{i}" for i in range(20_000))},
     "requirements", "spec.template.spec.requirements[0].values", "Too many: 20000: must have at most 1000 items"),
    ({"taints": "\n".join(f"k{i}=v:NoSchedule" for i in range(101))}, "taints", "spec.template.spec.taints",
     "Too many: 101: must have at most 100 items"),
]


@pytest.mark.parametrize("changes, field, path, rule", RULES, ids=[r[2] or r[1] for r in RULES])
def test_each_rule_of_the_nodepool_schema_is_reported_on_its_field_and_nothing_is_written(
        lab, people, client, changes, field, path, rule):
    client.force_login(people["sysadmin"])
    data = form_data(example_spec("a100-standard"), name="a100-standard", cluster=lab.cluster.pk)
    data.update(changes)
    response = client.post(reverse("provisioning-pool-create"), data)
    assert response.status_code == 200
    html = response.content.decode()
    errors = " ".join(text(e) for e in re.findall(
        rf'<div class="field has-error">\s*<label for="id_{field}">.*?</div>', html, re.S))
    assert rule in errors, (field, text(html)[:3000])
    if path:
        assert path in errors
    assert lab.emu.list(NODEPOOLS) == [] and not NodePool.objects.filter(name="a100-standard").exists()


def test_every_example_is_accepted_by_the_api_server(lab, people, client):
    client.force_login(people["sysadmin"])
    for example in ("h100-prod", "a100-standard", "t4-best-effort", "spot-only", "inference-only"):
        data = form_data(example_spec(example), name=example, cluster=lab.cluster.pk)
        assert client.post(reverse("provisioning-pool-create"), data).status_code == 302, example
    assert sorted(o["metadata"]["name"] for o in lab.emu.list(NODEPOOLS)) == [
        "a100-standard", "h100-prod", "inference-only", "spot-only", "t4-best-effort"]


def test_a_write_the_api_server_refuses_is_reported_and_nothing_is_kept(lab, people, client):
    client.force_login(people["sysadmin"])
    lab.emu.fail_next(n=1, status=422, path_prefix="/apis/karpenter.sh/v1/nodepools")
    data = form_data(example_spec("spot-only"), name="spot-only", cluster=lab.cluster.pk)
    response = client.post(reverse("provisioning-pool-create"), data)
    assert response.status_code == 200
    errors = text(re.search(r'<div class="errors" role="alert">(.*?)</div>', response.content.decode(), re.S).group(1))
    assert errors == "The API server refused the NodePool spot-only: injected fault 422"
    assert not NodePool.objects.filter(name="spot-only").exists() and lab.emu.list(NODEPOOLS) == []


def test_a_pool_of_that_name_already_there_is_reported_on_the_name_and_nothing_is_sent(lab, people, client):
    backed_pool(lab, "spot-only")
    client.force_login(people["sysadmin"])
    data = form_data(example_spec("spot-only"), name="spot-only", cluster=lab.cluster.pk)
    html = client.post(reverse("provisioning-pool-create"), data).content.decode()
    errors = text(re.search(r'<div class="field has-error">\s*<label for="id_name">.*?</div>', html, re.S).group(0))
    assert "Name: Pool 'spot-only' already selects nodes by karpenter.sh/nodepool=spot-only." in errors
    assert lab.emu.list(NODEPOOLS) == []
