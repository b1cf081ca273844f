"""Least privilege, proved (issue 15, item 3): every flow of the console that talks to a cluster runs
against one emulator, which records each request as Kubernetes RBAC names it (verb, API group,
resource[/subresource]). Then, for each of the console's identities (the sync's pods, the web's pods):
every recorded request is allowed by the ClusterRole its pods are bound to in the rendered manifests
(`kubectl kustomize deploy/overlays/example`), and that ClusterRole grants nothing no flow used.

A new feature that talks to a cluster adds one `Flow` to FLOWS (who runs it, and a function driving it
through the product's own code) and the rules it needs to deploy/base/rbac.yaml; this test then says
what is missing or unused. Skips without kubectl unless CONSOLE_REQUIRE_KUBECTL=1.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import pytest

from kubesim import ApiError, KubeEmulator
from tests.deploy.test_manifests import OVERLAY, find, pod_spec, render

SYNC, WEB = "sync", "web"
# Whose pods run a flow -> the Deployment they belong to (its service account's ClusterRole must allow it).
DEPLOYMENTS = {SYNC: "gpu-console-sync", WEB: "gpu-console-web"}
RBAC_VERBS = {"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"}


class Lab:
    """The test organisation (tests/conftest.py `Org`) on cluster `lab`, reached through one emulator."""

    def __init__(self, org, sim: KubeEmulator, users: dict, client) -> None:
        self.org, self.sim, self.users, self.client = org, sim, users, client
        self.cluster = org.cluster

    def api_client(self):
        from nodepools.sync import api_client_for

        return api_client_for(self.cluster)

    def enforcement_round(self):
        """What the sync's leader runs every 5 seconds (the registered leader task), once."""
        from enforcers.services import enforcement_round

        with self.api_client() as api_client:
            result = enforcement_round(self.cluster, api_client)
        assert result is not None and not result.refused, result and result.refused
        return result

    def mirror_nodes(self):
        """The database takes the cluster's nodes as they are now (what the sync's watch does)."""
        from nodepools import services as pool_services

        pool_services.cluster_objects_replace(cluster=self.cluster, nodes=self.sim.list("nodes"), pods=self.org.pods)

    def owned(self, kinds) -> list[tuple[str, dict]]:
        """(emulator resource key, object) of every object the console owns in the cluster, of `kinds`."""
        from enforcers import desired as d

        found = []
        for group, _version, plural, _kind in kinds:
            key = f"{plural}.{group}"
            for obj in self.sim.list(key):
                if (obj["metadata"].get("labels") or {}).get(d.MANAGED_BY_LABEL) == d.MANAGED_BY:
                    found.append((key, obj))
        return found

    def edit_behind_the_consoles_back(self, kinds) -> set[str]:
        """Someone else changes one field the console asserts in every owned object of `kinds` that has
        one (in the emulator itself: such edits are not the console's requests). Returns the edited
        objects as the console names them ("Queue rnd-a.a100")."""
        edited = set()
        for (key, obj), (_, _, _, kind) in ((found, kind) for kind in kinds for found in self.owned([kind])):
            meta = obj["metadata"]
            if _leaf(obj) is not None:
                try:
                    self.sim.update(key, meta["name"], _tamper, namespace=meta.get("namespace") or "")
                except ApiError as exc:
                    # The CRD forbids that change (a LocalQueue's clusterQueue is immutable: Kueue's CEL rule
                    # `self == oldSelf`); a label the console asserts may still be edited.
                    assert exc.code == 422 and "is immutable" in exc.message, exc
                    self.sim.update(key, meta["name"], _tamper_owner_label, namespace=meta.get("namespace") or "")
                edited.add(f"{kind} {meta['namespace']}/{meta['name']}" if meta.get("namespace")
                           else f"{kind} {meta['name']}")
        return edited


def _leaf(obj: dict) -> tuple[Any, Any] | None:
    """(container, key) of the field to edit: a description (a priority class's value is immutable),
    else the first number in the object's body, else its first string; None when its body holds neither
    (a Kueue Cohort's empty spec: nothing there for anyone to change)."""
    if isinstance(obj.get("description"), str):
        return obj, "description"
    body = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind", "metadata", "status")}
    found: dict[type, tuple[Any, Any]] = {}

    def walk(node) -> None:
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        for k, v in items:
            if isinstance(v, int) and not isinstance(v, bool):
                found.setdefault(int, (node, k))
            elif isinstance(v, str):
                found.setdefault(str, (node, k))
            walk(v)

    walk(body)
    return found.get(int) or found.get(str)


def _tamper_owner_label(obj: dict) -> dict:
    from enforcers.desired import OWNER_LABEL

    labels = obj["metadata"]["labels"]
    labels[OWNER_LABEL] = f"{labels[OWNER_LABEL]}-edited"
    return obj


def _tamper(obj: dict) -> dict:
    container, key = _leaf(obj)
    value = container[key]
    container[key] = value + 7 if isinstance(value, int) else f"{value}-edited"
    return obj


# ------------------------------------------------------------------------------------------------------
# The flows: each drives the product's own code against the emulator, and checks it did its work.

def sync_mirrors_nodes_and_pods(lab: Lab) -> None:
    """The sync lists then watches everything it mirrors (every registered resource: today Nodes and
    Pods), and a change in the cluster reaches the database through the watch."""
    from nodepools.models import Cluster, Node
    from nodepools.sync import ClusterSync, SyncOptions
    from nodepools.sync.resources import REGISTRY

    options = SyncOptions(backoff_base=0.05, backoff_max=0.3, read_timeout=5, unreachable_after=0.4,
                          batch_delay=0.02, tick=0.05, lock_poll=0.3, hint_interval=0.05)
    lab.cluster.refresh_from_db()
    sync = ClusterSync(lab.cluster, options, run_tasks=False)
    sync.start()
    try:
        assert sync.run_until(lambda: Cluster.objects.get(pk=lab.cluster.pk).last_full_sync is not None, 20)
        lab.sim.update_node("v100-1", {"metadata": {"labels": {"rbac-check": "watched"}}})
        assert sync.run_until(
            lambda: (Node.objects.get(cluster=lab.cluster, name="v100-1").labels or {}).get("rbac-check") == "watched",
            20), "the watch did not bring the change"
    finally:
        sync.stop()
    for resource in REGISTRY.values():
        assert {("list", resource.group, resource.plural), ("watch", resource.group, resource.plural)} <= (
            lab.sim.access_rules()), f"the sync did not list and watch {resource.name}"


def enforcer_kai(lab: Lab) -> None:
    """KAI Scheduler: the leader creates the priority classes, scheduling shards and queues and stamps
    the pool label on the nodes; a quota change updates a queue; edits by others are put back (every
    owned kind); choosing no enforcer deletes them all. Statuses come back with the lists."""
    from enforcers import desired as d
    from enforcers import services
    from projects import services as project_services

    services.enforcement_set(actor=None, cluster=lab.cluster, enforcer="kai")
    created = lab.enforcement_round()
    assert created.created and created.nodes_labelled == len(lab.org.nodes)
    lab.mirror_nodes()
    quota = lab.org.quota(lab.org.rnd_a, lab.org.a100)
    project_services.quota_update(actor=None, quota=quota, expected_version=quota.version, gpu_deserved=Decimal(3),
                                  gpu_limit=Decimal(6), over_quota_weight=5)
    assert lab.enforcement_round().updated == ["Queue rnd-a.a100"]
    edited = lab.edit_behind_the_consoles_back(d.KAI_KINDS)
    assert {label.split()[0] for label in edited} == {k for _, _, _, k in d.KAI_KINDS}
    assert set(lab.enforcement_round().drift) == edited
    services.enforcement_set(actor=None, cluster=lab.cluster, enforcer="none")
    assert len(lab.enforcement_round().deleted) == len(created.created)
    assert lab.owned(d.KAI_KINDS) == []


def enforcer_kueue(lab: Lab) -> None:
    """Kueue: the same for its workload priority classes, resource flavors, cohorts, cluster queues and
    local queues."""
    from enforcers import desired as d
    from enforcers import services

    services.enforcement_set(actor=None, cluster=lab.cluster, enforcer="kueue")
    created = lab.enforcement_round().created
    assert {label.split()[0] for label in created} == {k for _, _, _, k in d.KUEUE_KINDS}
    edited = lab.edit_behind_the_consoles_back(d.KUEUE_KINDS)
    # A Cohort's spec is empty: nothing of it can drift, so the console never updates one.
    assert {label.split()[0] for label in edited} == {k for _, _, _, k in d.KUEUE_KINDS} - {"Cohort"}
    assert set(lab.enforcement_round().drift) == edited
    services.enforcement_set(actor=None, cluster=lab.cluster, enforcer="none")
    assert len(lab.enforcement_round().deleted) == len(created)
    assert lab.owned(d.KUEUE_KINDS) == []


def web_moves_a_node(lab: Lab) -> None:
    """"Move node" on its page: the preview reads the Node as the cluster has it, the confirmation
    patches the pool's label on (conditional on the resourceVersion the preview read)."""
    import re

    from django.urls import reverse

    from nodepools.models import Node

    lab.client.force_login(lab.users["sysadmin"])
    url = reverse("node-move", args=[Node.objects.get(cluster=lab.cluster, name="v100-2").pk])
    preview = lab.client.post(url, {"pool": lab.org.a100.pk})
    assert preview.status_code == 200
    version = re.search(r'name="resource_version" value="([^"]*)"', preview.content.decode()).group(1)
    done = lab.client.post(url, {"pool": lab.org.a100.pk, "confirm": "1", "resource_version": version}, follow=True)
    assert done.status_code == 200
    assert lab.sim.get_node("v100-2")["metadata"]["labels"]["gpu-type"] == "A100"


def web_sets_a_pools_gpu_shape(lab: Lab) -> None:
    """A pool's GPU shape: the preview reads the mirror, the confirmation patches the MIG manager's layout
    label onto each of the pool's GPU nodes."""
    from django.urls import reverse

    from kube.gpu import LABEL_MIG_CONFIG

    lab.client.force_login(lab.users["sysadmin"])
    url = reverse("pool-gpu-shape", args=[lab.org.a100.pk])
    data = {"mig_config": "all-1g.10gb", "mig_config_custom": "", "device_plugin_config": ""}
    preview = lab.client.post(url, data)
    assert preview.status_code == 200 and preview.context["preview"] is not None
    done = lab.client.post(url, {**data, "confirm": "1", "previewed": preview.context["preview"].key}, follow=True)
    assert done.status_code == 200
    assert lab.sim.get_node("a100-1")["metadata"]["labels"][LABEL_MIG_CONFIG] == "all-1g.10gb"


def web_previews_an_enforcer(lab: Lab) -> None:
    """The enforcement page's dry run, and the API's: the web lists what the console owns in the cluster."""
    lab.client.force_login(lab.users["sysadmin"])
    page = lab.client.post(f"/clusters/{lab.cluster.pk}/enforcement/", {"enforcer": "kueue"})
    assert page.status_code == 200
    assert page.context["preview"] is not None and not page.context["preview_error"], page.context["preview_error"]
    assert page.context["preview"].create
    answer = lab.client.put(f"/api/v1/clusters/{lab.cluster.pk}/enforcement", {"enforcer": "kai", "dry_run": True},
                            content_type="application/json")
    assert answer.status_code == 202 and answer.json()["reachable"] is True, answer.content


def web_manages_a_karpenter_node_pool(lab: Lab) -> None:
    """A Karpenter-backed pool created from an example (creates its NodePool), its NodePool edited (read
    for its resourceVersion, then put back with it), the pool deleted with its NodePool."""
    import re

    from django.urls import reverse

    from nodepools.models import NodePool
    from provisioning.examples import example_spec
    from provisioning.forms import NodePoolForm

    def form(spec, **changes):
        return {**{k: ("" if v is None else v) for k, v in NodePoolForm.initial_from(spec).items()}, **changes}

    lab.client.force_login(lab.users["sysadmin"])
    created = lab.client.post(reverse("provisioning-pool-create"),
                              form(example_spec("t4-best-effort"), name="t4-best-effort", cluster=lab.cluster.pk))
    assert created.status_code == 302, created.content[:2000]
    pool = NodePool.objects.get(cluster=lab.cluster, name="t4-best-effort")
    url = reverse("provisioning-nodepool-edit", args=[pool.pk])
    version = re.search(r'name="resource_version" value="([^"]+)"', lab.client.get(url).content.decode()).group(1)
    spec = lab.sim.get("nodepools.karpenter.sh", "t4-best-effort")["spec"]
    edited = lab.client.post(url, form(spec, resource_version=version, weight="20"))
    assert edited.status_code == 302, edited.content[:2000]
    assert lab.sim.get("nodepools.karpenter.sh", "t4-best-effort")["spec"]["weight"] == 20
    deleted = lab.client.post(reverse("provisioning-pool-delete", args=[pool.pk]), {"nodepool": "delete", "confirm": "on"})
    assert deleted.status_code == 302
    assert lab.sim.get("nodepools.karpenter.sh", "t4-best-effort") is None


def web_submits_and_stops_a_workload(lab: Lab) -> None:
    """A researcher previews (dry run) and submits a workload (the Job is created in the project's
    namespace), then stops it (the Job is deleted)."""
    from rest_framework.test import APIClient

    from workloads.models import Workload

    api = APIClient()
    api.force_authenticate(lab.users["researcher"])
    body = {"project": lab.org.rnd_a.pk, "pools": ["a100", "default"], "image": "nvcr.io/nvidia/pytorch:24.05-py3",
            "command": "python train.py", "gpus": 1, "priority_class": "train", "pods": 1, "name": "rbac-train"}
    assert api.post("/api/v1/workloads/", {**body, "dry_run": True}, format="json").status_code == 200
    created = api.post("/api/v1/workloads/", body, format="json")
    assert created.status_code == 201, created.content
    job = lab.sim.get("jobs.batch", "rbac-train", namespace="runai-rnd-a")
    assert job is not None
    # The mirror row the Stop button acts on (the sync's flow mirrors Jobs; here it is stored directly).
    workload = Workload.objects.create(cluster=lab.cluster, namespace="runai-rnd-a", name="rbac-train",
                                       uid=job["metadata"].get("uid") or "")
    assert api.delete(f"/api/v1/workloads/{workload.pk}/").status_code == 204
    assert lab.sim.get("jobs.batch", "rbac-train", namespace="runai-rnd-a") is None


def web_explains_pending_gpu_pods_of_a_karpenter_pool(lab: Lab) -> None:
    """A Karpenter-backed pool's page and API, with a GPU pod pending: the unbound pods (their tolerations
    and affinity are not mirrored, so they are read from the cluster) with Karpenter's Nominated events,
    one pod's own explanation, and the advice (whether the cluster has PriorityClasses)."""
    from django.urls import reverse

    from kubesim import make_pod
    from nodepools import services as pool_services
    from provisioning.examples import example_spec
    from provisioning.models import KarpenterNodePool

    pool = pool_services.pool_create(actor=None, cluster=lab.cluster, name="spot-only",
                                     label_key="karpenter.sh/nodepool", label_value="spot-only")
    # The mirror of the cluster's NodePool (the sync's flow mirrors NodePools; here it is stored directly).
    KarpenterNodePool.objects.create(cluster=lab.cluster, name="spot-only", spec=example_spec("spot-only"))
    pending = make_pod("wants-gpus", "runai-rnd-a", node="", phase="Pending",
                       containers=[{"name": "main", "requests": {"nvidia.com/gpu": "1"}}])
    lab.sim.add_pod(pending)
    lab.org.pods.append(pending)
    lab.org.load()
    lab.client.force_login(lab.users["sysadmin"])
    assert lab.client.get(reverse("pool-detail", args=[pool.pk])).status_code == 200
    answer = lab.client.get(f"/api/v1/node-pools/{pool.pk}/pending-gpu-pods/")
    assert answer.status_code == 200, answer.content
    assert "wants-gpus" in answer.content.decode() and "Could not read" not in answer.content.decode()
    one = lab.client.get(f"/api/v1/clusters/{lab.cluster.pk}/pods/runai-rnd-a/wants-gpus/provisioning/")
    assert one.status_code == 200, one.content
    advice = lab.client.get(f"/api/v1/node-pools/{pool.pk}/advice/")
    assert advice.status_code == 200 and "Could not read" not in advice.content.decode(), advice.content


def web_shows_a_queued_workloads_position(lab: Lab) -> None:
    """The workloads table with a workload Kueue holds: its queue position is read from Kueue's visibility
    API (the pending workloads of its LocalQueue)."""
    from django.core.cache import cache
    from django.urls import reverse

    from workloads.models import KueueWorkload, Workload

    # The mirror rows (the sync's flow mirrors Jobs and Kueue Workloads; here they are stored directly).
    Workload.objects.create(cluster=lab.cluster, namespace="runai-rnd-a", name="queued", phase="Suspended",
                            queue="rnd-a", gpus=1, priority_class="train", priority=50)
    KueueWorkload.objects.create(cluster=lab.cluster, namespace="runai-rnd-a", name="job-queued-1a2b3",
                                 job_name="queued", queue_name="rnd-a", pending_reason="Pending",
                                 pending_message="couldn't assign flavors to pod set main: insufficient unused "
                                                 "quota for nvidia.com/gpu in flavor a100, 1 more needed")
    cache.clear()
    lab.client.force_login(lab.users["researcher"])
    assert lab.client.get(reverse("workload-list")).status_code == 200


@dataclass(frozen=True)
class Flow:
    name: str
    identity: str  # SYNC or WEB: whose pods run it, so whose ClusterRole must allow it
    run: Callable[[Lab], Any]


# One entry per way the console talks to a cluster. A new feature adds its flow here and the rules its
# requests need to deploy/base/rbac.yaml.
FLOWS: list[Flow] = [
    Flow("sync: list and watch every resource it mirrors", SYNC, sync_mirrors_nodes_and_pods),
    Flow("sync: KAI enforcement (priority classes, shards, queues; pool labels on nodes)", SYNC, enforcer_kai),
    Flow("sync: Kueue enforcement (workload priority classes, flavors, cohorts, queues)", SYNC, enforcer_kueue),
    Flow("web: move a node to a pool", WEB, web_moves_a_node),
    Flow("web: set a pool's GPU shape (the MIG layout label on its nodes)", WEB, web_sets_a_pools_gpu_shape),
    Flow("web: dry run of an enforcer change", WEB, web_previews_an_enforcer),
    Flow("web: a Karpenter-backed pool and its NodePool (create, edit, delete)", WEB, web_manages_a_karpenter_node_pool),
    Flow("web: submit (dry run, create) and stop a workload", WEB, web_submits_and_stops_a_workload),
    Flow("web: pending GPU pods of a Karpenter-backed pool, and the pool's advice", WEB,
         web_explains_pending_gpu_pods_of_a_karpenter_pool),
    Flow("web: a queued workload's position (Kueue's visibility API)", WEB, web_shows_a_queued_workloads_position),
]


# ------------------------------------------------------------------------------------------------------
# The ClusterRoles as rendered

def granted_by(role: dict) -> set[tuple[str, str, str]]:
    """(verb, group, resource) a ClusterRole grants. Only exact rules: no "*", no resourceNames, no
    nonResourceURLs, no aggregation (each would grant more than a list of names says)."""
    assert "aggregationRule" not in role, f"ClusterRole {role['metadata']['name']} aggregates other roles"
    out = set()
    for rule in role.get("rules") or []:
        where = f"ClusterRole {role['metadata']['name']} rule {rule}"
        assert not rule.get("resourceNames") and not rule.get("nonResourceURLs"), where
        for field in ("apiGroups", "resources", "verbs"):
            assert rule.get(field) and "*" not in rule[field], f"{where}: {field} must list names, not '*'"
        unknown = set(rule["verbs"]) - RBAC_VERBS
        assert not unknown, f"{where}: unknown verbs {sorted(unknown)}"
        out |= {(verb, group, resource) for verb in rule["verbs"] for group in rule["apiGroups"]
                for resource in rule["resources"]}
    return out


def cluster_role_of(docs: list[dict], deployment: str) -> dict:
    """The ClusterRole bound to the service account a Deployment's pods run as (and mount the token of)."""
    spec = pod_spec(find(docs, "Deployment", deployment))
    account = spec.get("serviceAccountName", "default")
    namespace = find(docs, "Deployment", deployment)["metadata"].get("namespace")
    sa = find(docs, "ServiceAccount", account)
    mounted = spec.get("automountServiceAccountToken", sa.get("automountServiceAccountToken", True))
    assert mounted, f"{deployment} talks to clusters but its pods get no token of {account}"
    bindings = [b for b in docs if b["kind"] == "ClusterRoleBinding"
                and {"kind": "ServiceAccount", "name": account, "namespace": namespace} in b.get("subjects", [])]
    assert len(bindings) == 1, f"{account} must be bound to exactly one ClusterRole, found {len(bindings)}"
    ref = bindings[0]["roleRef"]
    assert ref["kind"] == "ClusterRole" and ref["apiGroup"] == "rbac.authorization.k8s.io"
    return find(docs, "ClusterRole", ref["name"])


def describe(rules) -> str:
    return ", ".join(f"{verb} {resource}{'.' + group if group else ''}" for verb, group, resource in sorted(
        rules, key=lambda r: (r[1], r[2], r[0])))


@pytest.fixture
def lab(org, users, client, tmp_path, emulators):
    from nodepools import services as pool_services

    sim = emulators(bookmark_interval=0.2)
    path = sim.write_kubeconfig(tmp_path / "kubeconfig")
    pool_services.cluster_update(actor=None, cluster=org.cluster, kubeconfig_path=str(path))
    org.cluster.refresh_from_db()
    sim.load(org.nodes, org.pods)
    for namespace in ("runai-rnd-a", "runai-rnd-b", "runai-ops-a"):
        sim.add_namespace(namespace)
    return Lab(org, sim, users, client)


@pytest.mark.django_db
def test_each_clusterrole_allows_exactly_what_its_flows_use(lab):
    docs = render(OVERLAY)  # skips (or fails under CONSOLE_REQUIRE_KUBECTL=1) without kubectl
    used: dict[str, dict[tuple[str, str, str], list[str]]] = {identity: {} for identity in DEPLOYMENTS}
    for flow in FLOWS:
        lab.sim.reset_access_log()
        flow.run(lab)
        rules = lab.sim.access_rules()
        assert rules, f"flow {flow.name!r} made no request to the cluster"
        for rule in rules:
            used[flow.identity].setdefault(rule, []).append(flow.name)

    problems = []
    for identity, deployment in DEPLOYMENTS.items():
        role = cluster_role_of(docs, deployment)
        granted, name = granted_by(role), role["metadata"]["name"]
        for rule in sorted(set(used[identity]) - granted):
            problems.append(f"ClusterRole {name} lacks {describe([rule])}, used by {used[identity][rule]}")
        unused = granted - set(used[identity])
        if unused:
            problems.append(f"ClusterRole {name} grants what no {identity} flow uses: {describe(unused)}")
    assert not problems, "\n".join(problems)


def test_the_check_names_what_is_missing_and_what_is_unused():
    """The matching itself, on a hand-made role: exact names, no wildcards."""
    role = {"metadata": {"name": "r"}, "rules": [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"]},
        {"apiGroups": ["kueue.x-k8s.io"], "resources": ["clusterqueues", "localqueues"], "verbs": ["list"]}]}
    assert granted_by(role) == {("get", "", "nodes"), ("patch", "", "nodes"), ("list", "kueue.x-k8s.io", "clusterqueues"),
                                ("list", "kueue.x-k8s.io", "localqueues")}
    assert describe({("patch", "", "nodes"), ("list", "kueue.x-k8s.io", "localqueues")}) == (
        "patch nodes, list localqueues.kueue.x-k8s.io")
    for wide in ({"apiGroups": ["*"], "resources": ["nodes"], "verbs": ["get"]},
                 {"apiGroups": [""], "resources": ["*"], "verbs": ["get"]},
                 {"apiGroups": [""], "resources": ["nodes"], "verbs": ["*"]},
                 {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"], "resourceNames": ["a"]}):
        with pytest.raises(AssertionError):
            granted_by({"metadata": {"name": "wide"}, "rules": [wide]})
