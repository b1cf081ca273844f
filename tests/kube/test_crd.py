"""The CRD manifests of kube/crds/ and the validator that checks objects by them as the API server does.

Every manifest names its upstream source; every x-kubernetes-validations rule of every CRD compiles (a rule
calling a function the CEL library and our Kubernetes functions lack would fail here, as the API server
refuses such a CRD), and every rule is evaluated, without error, on valid objects of each kind (creates and
updates, so the transition rules run too): none is ever skipped.
"""
from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest
import yaml

from kube import crd
from kube.validation import NOT_CHECKED_MESSAGE, SchemaValidator
from kube.validation import cel as celrules

KEYS = [
    "queues.scheduling.run.ai", "podgroups.scheduling.run.ai", "schedulingshards.kai.scheduler",
    "resourceflavors.kueue.x-k8s.io", "clusterqueues.kueue.x-k8s.io", "localqueues.kueue.x-k8s.io",
    "cohorts.kueue.x-k8s.io", "workloads.kueue.x-k8s.io", "workloadpriorityclasses.kueue.x-k8s.io",
    "nodepools.karpenter.sh", "nodeclaims.karpenter.sh",
]
VERSIONS = {"scheduling.run.ai": {"queues": "v2", "podgroups": "v2alpha2"}, "kai.scheduler": "v1",
            "kueue.x-k8s.io": "v1beta2", "karpenter.sh": "v1"}


def described(schema: object) -> bool:
    """Whether a schema node or one below it has a ``description`` keyword (not a field of that name)."""
    if not isinstance(schema, dict):
        return False
    subs = [*(schema.get("properties") or {}).values(), schema.get("items"), schema.get("additionalProperties"),
            *(schema.get("anyOf") or ()), *(schema.get("allOf") or ())]
    return "description" in schema or any(described(sub) for sub in subs)


def test_every_manifest_is_a_crd_naming_its_upstream_source() -> None:
    assert sorted(r.key for r in map(crd.load, crd.manifests())) == sorted(KEYS)
    for path in crd.manifests():
        text = path.read_text(encoding="utf-8")
        resource = crd.load(path)
        assert re.fullmatch(r"(kai-scheduler/KAI-Scheduler|kubernetes-sigs/kueue|kubernetes-sigs/karpenter) \S+\.yaml "
                            r"@ [0-9a-f]{40} \(.+", resource.source), resource.source
        assert text.startswith(f"# {resource.kind} ({resource.group}), written from {resource.source}")
        assert not described(resource.schema), resource.key  # the descriptions are left out ...
        wanted = VERSIONS[resource.group]
        assert resource.version == (wanted[resource.plural] if isinstance(wanted, dict) else wanted)
        doc = yaml.safe_load(text)
        assert [v["name"] for v in doc["spec"]["versions"]] == [resource.version]


def test_a_field_named_description_is_kept() -> None:
    # ... but only the keyword: WorkloadPriorityClass has a field of that name.
    wpc = crd.custom_resource("workloadpriorityclasses.kueue.x-k8s.io")
    assert wpc.schema["properties"]["description"] == {"maxLength": 2048, "type": "string"}


def test_names_scope_subresources_and_printer_columns_come_from_the_manifest() -> None:
    claims = crd.custom_resource("nodeclaims.karpenter.sh")
    assert (claims.kind, claims.namespaced, claims.categories, claims.status_subresource) == (
        "NodeClaim", False, ("karpenter",), True)
    assert [(c.name, c.json_path, c.priority) for c in claims.columns][:5] == [
        ("Type", ".metadata.labels.node\\.kubernetes\\.io/instance-type", 0),
        ("Capacity", ".metadata.labels.karpenter\\.sh/capacity-type", 0),
        ("Zone", ".metadata.labels.topology\\.kubernetes\\.io/zone", 0),
        ("Node", ".status.nodeName", 0), ("Ready", '.status.conditions[?(@.type=="Ready")].status', 0)]
    pools = crd.custom_resource("nodepools.karpenter.sh")
    assert pools.scale == {"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.nodes"}
    local = crd.custom_resource("localqueues.kueue.x-k8s.io")
    assert local.namespaced and local.short_names == ("queue", "queues", "lq")


def test_every_rule_of_every_crd_compiles() -> None:
    rules = [(r.key, at, rule) for r in map(crd.load, crd.manifests()) for at, rule in r.validator.rules()]
    assert len(rules) == 64
    assert [(key, at, rule.rule, rule.error) for key, at, rule in rules if rule.error] == []
    # They use the CEL language and one function of the Kubernetes regex library (find).
    used = {name for _, _, rule in rules for name in rule.program.functions() if name[0].isalpha()}
    assert used == {"size", "int", "endsWith", "find"}


def test_a_rule_that_does_not_compile_is_reported_and_refused() -> None:
    for text, problem in [("self.quantity('1').isLessThan(1)", "undeclared reference to 'isLessThan', 'quantity'"),
                          ("self.?x.orValue(1)", "unsupported syntax"), ("self ==", "Failed to parse")]:
        rule = celrules.compile_rule({"rule": text, "message": "m"})
        assert problem in rule.error
        assert celrules.evaluate(rule, {}).detail.startswith("rule compile error: ")


def test_the_emulator_refuses_a_crd_whose_rule_does_not_compile(tmp_path: Path) -> None:
    from kubesim import register_crd

    doc = crd.read_manifest(crd.CRD_DIR / "karpenter.sh_nodeclaims.yaml")
    doc = copy.deepcopy(doc)
    doc["spec"]["group"] = "example.com"
    doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["x-kubernetes-validations"] = [
        {"rule": "self.spec.isQuantity()", "message": "m"}]
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(ValueError, match=r"nodeclaims.example.com: x-kubernetes-validations rules that do not compile"):
        register_crd(path)


# ------------------------------------------------------------------------------------ every rule runs

REF = {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}
NODEPOOL = {"spec": {
    "weight": 10, "limits": {"nvidia.com/gpu": "16", "cpu": 1000},
    "disruption": {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "5m",
                   "budgets": [{"nodes": "10%"}, {"nodes": "0", "schedule": "0 9 * * mon-fri", "duration": "8h",
                                                  "reasons": ["Drifted"]}]},
    "template": {
        "metadata": {"labels": {"team": "ml", "karpenter.sh/capacity-type": "spot"}},
        "spec": {"nodeClassRef": dict(REF), "expireAfter": "720h", "requirements": [
            {"key": "karpenter.k8s.aws/instance-gpu-count", "operator": "Gt", "values": ["0"]},
            {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["p5.48xlarge", "p4d.24xlarge"],
             "minValues": 2}],
            "taints": [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}]}}}}
NODECLAIM = {"spec": {"nodeClassRef": dict(REF), "requirements": [
    {"key": "karpenter.sh/nodepool", "operator": "In", "values": ["gpu"]},
    {"key": "karpenter.k8s.aws/instance-gpu-count", "operator": "Gte", "values": ["8"]}]},
    "status": {"nodeName": "ip-10-0-0-1", "conditions": [
        {"type": "Ready", "status": "True", "reason": "Ready", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}}
CLUSTERQUEUE = {"spec": {
    "cohortName": "research", "fairSharing": {"weight": 2},
    "flavorFungibility": {"whenCanBorrow": "TryNextFlavor", "whenCanPreempt": "TryNextFlavor",
                          "preference": "BorrowingOverPreemption"},
    "preemption": {"reclaimWithinCohort": "Any", "borrowWithinCohort": {"policy": "LowerPriority"}},
    "resourceGroups": [{"coveredResources": ["nvidia.com/gpu", "cpu"], "flavors": [
        {"name": "a100", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 8, "borrowingLimit": 4},
                                       {"name": "cpu", "nominalQuota": "96"}]}]}]}}
COHORT = {"spec": {"resourceGroups": [{"coveredResources": ["nvidia.com/gpu"], "flavors": [
    {"name": "a100", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 16}]}]}]}}
LOCALQUEUE = {"spec": {"clusterQueue": "team-a"}}
TOLERATIONS = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
               {"key": "spot", "operator": "Equal", "value": "true", "effect": "NoExecute", "tolerationSeconds": 30},
               {"operator": "Exists"}]
FLAVOR = {"spec": {"nodeLabels": {"gpu-type": "a100"}, "topologyName": "datacenter",
                   "nodeTaints": [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}],
                   "tolerations": copy.deepcopy(TOLERATIONS)}}
T0 = "2026-01-01T00:00:00Z"
WORKLOAD = {
    "spec": {"queueName": "team-a", "priority": 100, "maximumExecutionTimeSeconds": 3600,
             "priorityClassRef": {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass", "name": "inference"},
             "podSets": [{"name": "main", "count": 2, "minCount": 1, "template": {"spec": {
                 "containers": [{"name": "c", "image": "trainer:1", "resources": {"requests": {"nvidia.com/gpu": "1"}}}]}}}]},
    "status": {
        "conditions": [{"type": t, "status": "True", "reason": "Admitted", "message": "", "lastTransitionTime": T0}
                       for t in ("QuotaReserved", "Admitted")],
        "clusterName": "worker-1",
        "admission": {"clusterQueue": "team-a", "podSetAssignments": [{
            "name": "main", "count": 2, "flavors": {"nvidia.com/gpu": "a100"}, "resourceUsage": {"nvidia.com/gpu": "2"},
            "topologyAssignment": {"levels": ["rack", "host"], "slices": [{
                "domainCount": 2, "podCounts": {"individual": [1, 1]},
                "valuesPerLevel": [{"universal": "rack-1"}, {"individual": {"roots": ["h1", "h2"]}}]}]}}]},
        "admissionChecks": [{"name": "provisioning", "state": "Ready", "message": "", "lastTransitionTime": T0,
                             "podSetUpdates": [{"name": "main", "tolerations": copy.deepcopy(TOLERATIONS)}]}]}}

VALID = {  # key: (object on create, object of an update of it)
    "nodepools.karpenter.sh": (NODEPOOL, NODEPOOL),
    "nodeclaims.karpenter.sh": (NODECLAIM, NODECLAIM),
    "clusterqueues.kueue.x-k8s.io": (CLUSTERQUEUE, CLUSTERQUEUE),
    "cohorts.kueue.x-k8s.io": (COHORT, COHORT),
    "localqueues.kueue.x-k8s.io": (LOCALQUEUE, LOCALQUEUE),
    "resourceflavors.kueue.x-k8s.io": (FLAVOR, FLAVOR),
    "workloads.kueue.x-k8s.io": (WORKLOAD, WORKLOAD),
}


def test_every_rule_is_evaluated_on_valid_objects_and_none_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    ran: list[tuple[str, celrules.Outcome]] = []
    evaluate = celrules.evaluate

    def recording(rule: celrules.Rule, value, old=celrules.UNSET) -> celrules.Outcome:
        outcome = evaluate(rule, value, old)
        if not (rule.uses_old_self and old is celrules.UNSET):  # skipped: no old value to compare with
            ran.append((rule.rule, outcome))
        return outcome

    monkeypatch.setattr(celrules, "evaluate", recording)
    for key, (created, updated) in VALID.items():
        validator = crd.custom_resource(key).validator
        obj = validator.default(copy.deepcopy(created))
        assert validator.validate(obj) == [], key
        new = validator.default(copy.deepcopy(updated))
        assert validator.validate(new, old=obj) == [], key
    every = {rule.rule for r in map(crd.load, crd.manifests()) for _, rule in r.validator.rules()}
    assert {text for text, _ in ran} == every
    assert [(text, o.detail) for text, o in ran if not o.passed] == []


# ------------------------------------------------------------------------------------ what rules refuse

def causes(key: str, obj: dict, old: dict | None = None) -> list[tuple[str, str]]:
    validator = crd.custom_resource(key).validator
    new = validator.default(copy.deepcopy(obj))
    before = validator.default(copy.deepcopy(old)) if old is not None else None
    return [(c.field, c.message) for c in validator.validate(new, old=before)]


def changed(obj: dict, path: str, value: object) -> dict:
    out = copy.deepcopy(obj)
    *parents, last = re.findall(r"[^.\[\]]+", path)
    node = out
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node[part]
    if value is None:
        del node[last]
    else:
        node[int(last) if isinstance(node, list) else last] = value
    return out


@pytest.mark.parametrize("key, obj, field, message", [
    ("clusterqueues.kueue.x-k8s.io", changed(CLUSTERQUEUE, "spec.cohortName", None), "spec",
     'Invalid value: "object": borrowingLimit must be nil when cohort is empty'),
    ("clusterqueues.kueue.x-k8s.io", changed(CLUSTERQUEUE, "spec.flavorFungibility.whenCanBorrow", "MayStopSearch"),
     "spec.flavorFungibility", 'Invalid value: "object": preference can only be set when both whenCanBorrow and '
                               "whenCanPreempt are TryNextFlavor"),
    ("clusterqueues.kueue.x-k8s.io", changed(CLUSTERQUEUE, "spec.preemption.reclaimWithinCohort", "Never"),
     "spec.preemption", 'Invalid value: "object": reclaimWithinCohort=Never and borrowWithinCohort.Policy!=Never'),
    ("clusterqueues.kueue.x-k8s.io", changed(CLUSTERQUEUE, "spec.resourceGroups.0.coveredResources", ["cpu"]),
     "spec.resourceGroups[0]", 'Invalid value: "object": flavors must have the same number of resources as the '
                               "coveredResources"),
    ("resourceflavors.kueue.x-k8s.io", changed(FLAVOR, "spec.nodeLabels", {}), "spec",
     'Invalid value: "object": at least one nodeLabel is required when topology is set'),
    ("resourceflavors.kueue.x-k8s.io", changed(FLAVOR, "spec.tolerations.2", {"operator": "Equal"}),
     "spec.tolerations", "Invalid value: \"array\": operator must be Exists when 'key' is empty, which means 'match "
                         "all values and all keys'"),
    ("resourceflavors.kueue.x-k8s.io", changed(FLAVOR, "spec.tolerations.0.value", "x"), "spec.tolerations",
     "Invalid value: \"array\": a value must be empty when 'operator' is 'Exists'"),
    ("workloads.kueue.x-k8s.io", changed(WORKLOAD, "spec.priority", None), "spec",
     'Invalid value: "object": priority should not be nil when priorityClassRef is set'),
    ("workloads.kueue.x-k8s.io", changed(WORKLOAD, "spec.podSets.0.minCount", 3), "spec.podSets[0]",
     'Invalid value: "object": minCount should be positive and less or equal to count'),
    ("workloads.kueue.x-k8s.io", changed(WORKLOAD, "spec.priorityClassRef.kind", "PriorityClass"),
     "spec.priorityClassRef", 'Invalid value: "object": only the WorkloadPriorityClass kind is allowed for the '
                              "kueue.x-k8s.io group"),
    ("workloads.kueue.x-k8s.io", changed(WORKLOAD, "status.nominatedClusterNames", ["worker-2"]), "status",
     'Invalid value: "object": clusterName and nominatedClusterNames are mutually exclusive'),
    ("workloads.kueue.x-k8s.io",
     changed(WORKLOAD, "status.admission.podSetAssignments.0.topologyAssignment.slices.0.podCounts.universal", 2),
     "status.admission.podSetAssignments[0].topologyAssignment.slices[0].podCounts",
     'Invalid value: "object": exactly one of the fields in [universal individual] must be set'),
    ("workloads.kueue.x-k8s.io",
     changed(WORKLOAD, "status.admission.podSetAssignments.0.topologyAssignment.levels", ["rack"]),
     "status.admission.podSetAssignments[0].topologyAssignment",
     'Invalid value: "object": valuesPerLevel must have the same length as the number of levels in this '
     "TopologyAssignment"),
    ("workloads.kueue.x-k8s.io", changed(WORKLOAD, "status.admission.podSetAssignments", []), "<nil>",
     'Invalid value: "object": podSetAssignments must have the same number of podSets as the spec'),
])
def test_each_kueue_rule_refuses_with_its_message_on_its_field(key: str, obj: dict, field: str, message: str) -> None:
    assert causes(key, obj) == [(field, message)]


@pytest.mark.parametrize("key, old, new, field, message", [
    ("localqueues.kueue.x-k8s.io", LOCALQUEUE, changed(LOCALQUEUE, "spec.clusterQueue", "team-b"), "spec.clusterQueue",
     'Invalid value: "string": field is immutable'),
    ("resourceflavors.kueue.x-k8s.io", FLAVOR, changed(FLAVOR, "spec.topologyName", "other"), "spec",
     'Invalid value: "object": topologyName is immutable when topologyName is set'),
    ("workloads.kueue.x-k8s.io", WORKLOAD, changed(WORKLOAD, "spec.queueName", "team-b"), "<nil>",
     'Invalid value: "object": queueName is immutable while workload quota reserved'),
    ("workloads.kueue.x-k8s.io", WORKLOAD, changed(WORKLOAD, "status.clusterName", "worker-2"), "status",
     'Invalid value: "object": clusterName is immutable once set'),
    ("nodeclaims.karpenter.sh", NODECLAIM, changed(NODECLAIM, "spec.nodeClassRef.name", "other"), "spec",
     'Invalid value: "object": spec is immutable'),
])
def test_transition_rules_compare_with_the_old_object(key: str, old: dict, new: dict, field: str, message: str) -> None:
    assert causes(key, new) == []  # a create has no old value: transition rules do not run
    assert causes(key, new, old) == [(field, message)]


def test_old_values_are_correlated_through_map_lists_not_other_lists() -> None:
    schema = {"type": "object", "properties": {
        "byName": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
                   "items": {"type": "object", "required": ["name"], "properties": {
                       "name": {"type": "string"},
                       "size": {"type": "integer", "x-kubernetes-validations": [
                           {"rule": "self >= oldSelf", "message": "may only grow"}]}}}},
        "atomic": {"type": "array", "items": {"type": "object", "properties": {
            "size": {"type": "integer", "x-kubernetes-validations": [{"rule": "self >= oldSelf", "message": "x"}]}}}}}}
    validator = SchemaValidator(schema)
    old = {"byName": [{"name": "a", "size": 2}, {"name": "b", "size": 5}], "atomic": [{"size": 9}]}
    new = {"byName": [{"name": "b", "size": 4}, {"name": "a", "size": 3}, {"name": "c", "size": 1}], "atomic": [{"size": 1}]}
    assert [(c.field, c.message) for c in validator.validate(new, old)] == [
        ("byName[0].size", 'Invalid value: "integer": may only grow')]


# ------------------------------------------------------------------------------------ the OpenAPI schema

def test_schema_errors_are_the_api_servers_and_block_the_rules() -> None:
    obj = changed(NODEPOOL, "spec.weight", 0)
    obj["spec"]["template"]["spec"]["requirements"][0]["operator"] = "Maybe"
    obj["spec"]["template"]["spec"]["requirements"].append({"key": "kubernetes.io/hostname", "operator": "In",
                                                           "values": ["n1"]})
    obj["spec"]["limits"]["memory"] = "lots"
    obj["spec"]["disruption"]["budgets"][1]["nodes"] = "120%"
    got = causes("nodepools.karpenter.sh", obj)
    quantity = crd.custom_resource("nodepools.karpenter.sh").schema["properties"]["spec"]["properties"]["limits"][
        "additionalProperties"]["pattern"]
    assert sorted(got) == sorted([
        ("spec.weight", "Invalid value: 0: spec.weight in body should be greater than or equal to 1"),
        ("spec.template.spec.requirements[0].operator", 'Unsupported value: "Maybe": supported values: "In", "NotIn", '
                                                         '"Exists", "DoesNotExist", "Gt", "Lt", "Gte", "Lte"'),
        ("spec.limits.memory", f"Invalid value: \"lots\": spec.limits.memory in body should match '{quantity}'"),
        ("spec.disruption.budgets[1].nodes", "Invalid value: \"120%\": spec.disruption.budgets[1].nodes in body "
                                             "should match '^((100|[0-9]{1,2})%|[0-9]+)$'"),
        ("<nil>", NOT_CHECKED_MESSAGE),  # the enum error blocks the rules: the hostname key is not reported
    ])


def test_int_or_string_nullable_formats_list_types_and_bounds() -> None:
    schema = {"type": "object", "properties": {
        "q": {"anyOf": [{"type": "integer"}, {"type": "string"}], "x-kubernetes-int-or-string": True},
        "n": {"type": "string", "nullable": True},
        "t": {"type": "string", "format": "date-time"},
        "i": {"type": "integer", "format": "int32", "minimum": 0, "exclusiveMinimum": True},
        "set": {"type": "array", "items": {"type": "string"}, "x-kubernetes-list-type": "set", "maxItems": 3},
        "map": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
                "items": {"type": "object", "properties": {"name": {"type": "string"}, "v": {"type": "integer"}}}},
        "s": {"type": "string", "maxLength": 3, "minLength": 2}}}
    validator = SchemaValidator(schema)
    assert validator.validate({"q": 4, "n": None, "t": "2026-01-01T10:00:00Z", "i": 1, "set": ["a", "b"],
                               "map": [{"name": "a"}, {"name": "b"}], "s": "abc"}) == []
    assert validator.validate({"q": "50%"}) == []
    got = [(c.reason, c.field, c.message) for c in validator.validate({
        "q": 1.5, "t": "yesterday", "i": 0, "set": ["a", "a", "b", "c"], "map": [{"name": "a", "v": 1}, {"name": "a"}],
        "s": "abcd"})]
    assert sorted(got) == sorted([
        ("FieldValueTypeInvalid", "q", 'Invalid value: "number": q in body must be of type integer,string: "number"'),
        ("FieldValueTypeInvalid", "t", 'Invalid value: "yesterday": t in body must be of type date-time: "yesterday"'),
        ("FieldValueInvalid", "i", "Invalid value: 0: i in body should be greater than 0"),
        ("FieldValueTooMany", "set", "Too many: 4: must have at most 3 items"),
        ("FieldValueDuplicate", "set[1]", 'Duplicate value: "a"'),
        ("FieldValueDuplicate", "map[1]", 'Duplicate value: map[string]interface {}{"name":"a"}'),
        ("FieldValueTooLong", "s", "Too long: may not be more than 3 bytes"),
    ])


def test_pruning_and_structural_defaulting() -> None:
    validator = crd.custom_resource("clusterqueues.kueue.x-k8s.io").validator
    obj = {"spec": {"unknown": 1, "cohortName": None, "resourceGroups": [{"coveredResources": ["cpu"], "extra": True,
                                                                          "flavors": [{"name": "f", "resources": [
                                                                              {"name": "cpu", "nominalQuota": 1}]}]}]}}
    assert validator.prune(obj) == ["spec.unknown", "spec.resourceGroups[0].extra"]
    assert "cohortName" not in obj["spec"]  # a null of a field that is not nullable goes
    validator.default(obj)
    spec = obj["spec"]
    assert spec["queueingStrategy"] == "BestEffortFIFO"
    # `flavorFungibility: {}` by default, then its own fields' defaults inside it.
    assert spec["flavorFungibility"] == {"whenCanBorrow": "MayStopSearch", "whenCanPreempt": "TryNextFlavor"}
    assert spec["preemption"] == {"borrowWithinCohort": {"policy": "Never"}, "reclaimWithinCohort": "Never",
                                  "withinClusterQueue": "Never"}


# ------------------------------------------------------------------------------------ the CEL functions

@pytest.mark.parametrize("expression, value", [
    ('"karpenter.sh/nodepool".find("^([^/]+)")', "karpenter.sh"),
    ('"abc".find("x")', ""),
    ('"a1b22c333".findAll("[0-9]+")', ["1", "22", "333"]),
    ('"a1b22c333".findAll("[0-9]+", 2)', ["1", "22"]),
    ("[1, 2, 2, 5].isSorted()", True),
    ('["b", "a"].isSorted()', False),
    ("[1, 2, 3].sum()", 6),
    ("[3, 1, 2].min()", 1),
    ("[3, 1, 2].max()", 3),
    ("[1, 2, 1].indexOf(1)", 0),
    ("[1, 2, 1].lastIndexOf(1)", 2),
    ('"hello".indexOf("l")', 2),
    ('"Hello".lowerAscii()', "hello"),
    ('"a,b".split(",")', ["a", "b"]),
    ('"nvidia.com/gpu".matches("^[a-z.]+/gpu$")', True),
    ('duration("1h30m") > duration("90m") || duration("1h30m") == duration("90m")', True),
])
def test_the_kubernetes_cel_functions(expression: str, value: object) -> None:
    rule = celrules.compile_rule({"rule": f"({expression}) == dyn(self)"})
    assert rule.error == ""
    assert celrules.evaluate(rule, value).passed


def test_evaluation_errors_read_as_the_api_servers() -> None:
    def detail(text: str, value: object) -> str:
        return celrules.evaluate(celrules.compile_rule({"rule": text, "message": "the message"}), value).detail

    assert detail("self.values.size() > 0", {}) == "no such key: values evaluating rule: the message"
    assert detail("int(self) >= 0", "eight") == "type conversion error from 'string' to 'int' evaluating rule: the message"
    assert detail("self + 1 > 0", "x").startswith("'no such overload': call arguments did not match")
    assert detail("self.size() == 0", "x") == "the message"
    assert celrules.evaluate(celrules.compile_rule({"rule": "self == 1"}), 2).detail == "failed rule: self == 1"
    message = celrules.compile_rule({"rule": "self < 3", "messageExpression": "'got ' + string(self)"})
    assert celrules.evaluate(message, 5).detail == "got 5"
