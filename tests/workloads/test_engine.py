"""OSMO's submission steps as the console computes them (workloads/engine.py): template merge order,
variables, a platform's nodes, resource validation with units and per-node reasons, platform limits."""
from __future__ import annotations

from decimal import Decimal

import pytest

from kube.taints import tolerates
from workloads import engine
from workloads.engine import NodeView, Rule

GI = 2**30

# OSMO's own examples (deployment guide, "Heterogeneous Pools" and "Pod Templates").
DEFAULT_CTRL = {"spec": {"containers": [{"name": "osmo-ctrl", "resources": {
    "limits": {"cpu": "{{USER_CPU}}", "memory": "{{USER_MEMORY}}"}, "requests": {"memory": "1Gi"}}}]}}
DEFAULT_USER = {"spec": {"containers": [{"name": "{{WF_TASK_NAME}}", "resources": {
    "limits": {"cpu": "{{USER_CPU}}", "memory": "{{USER_MEMORY}}", "nvidia.com/gpu": "{{USER_GPU}}"},
    "requests": {"cpu": "{{USER_CPU}}", "memory": "{{USER_MEMORY}}", "nvidia.com/gpu": "{{USER_GPU}}"}}}]}}
DEFAULT_AMD64 = {"spec": {"nodeSelector": {"kubernetes.io/arch": "amd64"}}}
L40S = {"spec": {"nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-L40S"}}}
A100 = {"spec": {"nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-A100"}, "tolerations": [
    {"key": "nvidia.com/gpu.product", "operator": "Equal", "value": "NVIDIA-A100", "effect": "NoSchedule"}]}}
SHARED_MEMORY = {"spec": {"containers": [{"name": "{{WF_TASK_NAME}}", "volumeMounts": [
    {"name": "shm", "mountPath": "/dev/shm"}]}], "volumes": [{"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}}]}}


# ---------------------------------------------------------------------------------------------------
# Merge order

def test_platform_override_after_pool_common_templates_as_in_osmo_heterogeneous_pool():
    common = [("default_amd64", DEFAULT_AMD64), ("default_user", DEFAULT_USER)]
    a100 = engine.merge_templates(common + [("a100", A100)])
    l40s = engine.merge_templates(common + [("l40s", L40S)])

    # Dictionaries merge: the platform adds its GPU product next to the pool's architecture.
    assert a100["spec"]["nodeSelector"] == {"kubernetes.io/arch": "amd64", "nvidia.com/gpu.product": "NVIDIA-A100"}
    assert l40s["spec"]["nodeSelector"] == {"kubernetes.io/arch": "amd64", "nvidia.com/gpu.product": "NVIDIA-L40S"}
    # A key that is a list only in the later template takes that list.
    assert a100["spec"]["tolerations"] == A100["spec"]["tolerations"]
    assert "tolerations" not in l40s["spec"]
    # The user container of the common template is kept.
    assert [c["name"] for c in a100["spec"]["containers"]] == ["{{WF_TASK_NAME}}"]


def test_later_template_wins_for_scalars_and_inputs_are_not_changed():
    h100 = {"spec": {"nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H100"}}}
    merged = engine.merge_templates([("a100", A100), ("h100", h100)])
    assert merged["spec"]["nodeSelector"]["nvidia.com/gpu.product"] == "NVIDIA-H100"
    assert A100["spec"]["nodeSelector"]["nvidia.com/gpu.product"] == "NVIDIA-A100"
    merged["spec"]["tolerations"].append({"key": "x"})
    assert len(A100["spec"]["tolerations"]) == 1


def test_lists_merge_by_name_and_other_items_are_appended():
    merged = engine.merge_templates([
        ("default_ctrl", DEFAULT_CTRL), ("default_user", DEFAULT_USER), ("shared_memory", SHARED_MEMORY),
        ("ctrl_bigger", {"spec": {"containers": [{"name": "osmo-ctrl", "resources": {"requests": {"memory": "2Gi"}}}]}}),
    ])
    containers = merged["spec"]["containers"]
    # osmo-ctrl first, the user container appended (different name); later ones merged into them by name.
    assert [c["name"] for c in containers] == ["osmo-ctrl", "{{WF_TASK_NAME}}"]
    ctrl, user = containers
    assert ctrl["resources"]["requests"] == {"memory": "2Gi"}
    assert ctrl["resources"]["limits"] == {"cpu": "{{USER_CPU}}", "memory": "{{USER_MEMORY}}"}
    assert user["volumeMounts"] == [{"name": "shm", "mountPath": "/dev/shm"}]
    assert user["resources"]["limits"]["nvidia.com/gpu"] == "{{USER_GPU}}"
    assert merged["spec"]["volumes"] == [{"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}}]


def test_tolerations_without_names_are_appended_in_order():
    extra = {"spec": {"tolerations": [{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}]}}
    merged = engine.merge_templates([("a100", A100), ("dedicated", extra)])
    assert [t["key"] for t in merged["spec"]["tolerations"]] == ["nvidia.com/gpu.product", "dedicated"]


def test_a_later_mapping_replaces_a_scalar_and_a_later_list_replaces_a_mapping():
    merged = engine.merge_templates([("a", {"spec": {"x": "text", "y": {"k": 1}}}),
                                     ("b", {"spec": {"x": {"deep": True}, "y": [1, 2]}})])
    assert merged == {"spec": {"x": {"deep": True}, "y": [1, 2]}}


# ---------------------------------------------------------------------------------------------------
# Variables

def test_variables_default_then_pool_then_platform_then_user():
    assert engine.resolve_variables(pool_defaults={}, platform_defaults={}, user_values={}) == {
        "USER_CPU": "1", "USER_GPU": "0", "USER_MEMORY": "1Gi", "USER_STORAGE": "1Gi"}
    resolved = engine.resolve_variables(
        pool_defaults={"USER_CPU": 16, "USER_GPU": 1, "USER_MEMORY": "64Gi", "USER_STORAGE": "500Gi"},
        platform_defaults={"USER_MEMORY": "80Gi"},
        user_values={"USER_GPU": 4, "USER_STORAGE": None},
    )
    assert resolved == {"USER_CPU": "16", "USER_GPU": "4", "USER_MEMORY": "80Gi", "USER_STORAGE": "500Gi"}


def test_substitute_fills_user_and_workflow_variables():
    variables = engine.resolve_variables(pool_defaults={}, platform_defaults={"USER_GPU": 2},
                                         user_values={"USER_MEMORY": "32Gi"}) | {"WF_TASK_NAME": "train"}
    body = engine.substitute(engine.merge_templates([("default_user", DEFAULT_USER)]), variables,
                             template="default_user")
    container = body["spec"]["containers"][0]
    assert container["name"] == "train"
    assert container["resources"]["requests"] == {"cpu": "1", "memory": "32Gi", "nvidia.com/gpu": "2"}
    assert engine.substitute({"a": "{{ USER_GPU }} GPUs on {{WF_TASK_NAME}}"}, variables, template="t") == \
        {"a": "2 GPUs on train"}


def test_unknown_variable_names_the_template_and_the_variable():
    variables = engine.resolve_variables(pool_defaults={}, platform_defaults={}, user_values={})
    with pytest.raises(engine.TemplateError) as caught:
        engine.substitute({"spec": {"containers": [{"name": "x", "env": [{"name": "N", "value": "{{ USER_NODES }}"}]}]}},
                          variables, template="training_h100")
    assert caught.value.template == "training_h100"
    assert caught.value.variable == "USER_NODES"
    assert "training_h100" in str(caught.value) and "USER_NODES" in str(caught.value)


def test_unbalanced_braces_and_control_blocks_are_template_errors():
    with pytest.raises(engine.TemplateError, match="unbalanced"):
        engine.substitute({"a": "{{ USER_CPU"}, {"USER_CPU": "1"}, template="t")
    with pytest.raises(engine.TemplateError, match="control block"):
        engine.substitute({"a": "{% if USER_CPU > 2 %}2{% endif %}"}, {"USER_CPU": "1"}, template="t")


def test_default_variables_are_checked():
    assert engine.default_variables_errors({"USER_GPU": 1, "USER_MEMORY": "8Gi", "WF_POOL": "x"}) == []
    errors = engine.default_variables_errors({"user_gpu": 1, "USER_MEMORY": "lots", "USER_CPU": -1})
    assert any("'user_gpu' is not a variable name" in e for e in errors)
    assert any(e.startswith("USER_MEMORY:") and "quantities must match" in e for e in errors)
    assert any(e.startswith("USER_CPU:") and "negative" in e for e in errors)


def test_pod_template_errors_name_the_field():
    assert engine.pod_template_errors(A100) == []
    assert engine.pod_template_errors(["not", "a", "mapping"])[0].startswith("A pod template must be a mapping")
    errors = engine.pod_template_errors({"spec": {"containers": {"name": "x"}, "tolerations": [{"operator": "Sometimes"}]},
                                         "nodeSelector": {}})
    assert any(e.startswith("'nodeSelector'") and "under 'spec'" in e for e in errors)
    assert "spec.containers: must be a list." in errors
    assert any(e.startswith("spec.tolerations[0].operator: Unsupported value") for e in errors)


# ---------------------------------------------------------------------------------------------------
# A platform's nodes

def node(name, labels=None, taints=None, **amounts):
    return NodeView(name=name, labels=labels or {}, taints=taints or [], **amounts)


A100_TAINT = {"key": "nvidia.com/gpu.product", "value": "NVIDIA-A100", "effect": "NoSchedule"}


def test_platform_nodes_match_labels_and_tolerate_taints():
    nodes = [
        node("a100-1", {"nvidia.com/gpu.product": "NVIDIA-A100"}, [A100_TAINT]),
        node("a100-2", {"nvidia.com/gpu.product": "NVIDIA-A100"}, [A100_TAINT, {"key": "maintenance", "effect": "NoExecute"}]),
        node("a100-3", {"nvidia.com/gpu.product": "NVIDIA-A100"}, [{"key": "spot", "effect": "PreferNoSchedule"}]),
        node("l40s-1", {"nvidia.com/gpu.product": "NVIDIA-L40S"}),
    ]
    selector = {"nvidia.com/gpu.product": "NVIDIA-A100"}
    matched = engine.platform_nodes(node_selector=selector, tolerations=A100["spec"]["tolerations"], nodes=nodes)
    # a100-2's NoExecute taint is not tolerated; PreferNoSchedule never keeps a node out.
    assert [n.name for n in matched] == ["a100-1", "a100-3"]
    # Without the toleration the NoSchedule taint keeps a100-1 out.
    assert [n.name for n in engine.platform_nodes(node_selector=selector, tolerations=[], nodes=nodes)] == ["a100-3"]
    assert engine.node_exclusion_reason(node_selector=selector, tolerations=[], node=nodes[0]) == \
        "taint not tolerated: nvidia.com/gpu.product=NVIDIA-A100:NoSchedule"
    assert engine.node_exclusion_reason(node_selector=selector, tolerations=[], node=nodes[3]) == \
        "labels do not match nvidia.com/gpu.product=NVIDIA-A100"


@pytest.mark.parametrize("toleration, tolerated", [
    ({"key": "nvidia.com/gpu.product", "operator": "Exists"}, True),                 # any value, any effect
    ({"key": "nvidia.com/gpu.product", "operator": "Equal", "value": "NVIDIA-H100"}, False),
    ({"key": "nvidia.com/gpu.product", "value": "NVIDIA-A100"}, True),               # Equal is the default
    ({"key": "nvidia.com/gpu.product", "value": "NVIDIA-A100", "effect": "NoExecute"}, False),
    ({"operator": "Exists"}, True),                                                 # empty key + Exists: all
    ({"operator": "Exists", "effect": "NoExecute"}, False),
    ({"key": "other", "operator": "Exists"}, False),
])
def test_toleration_semantics_are_kubernetes(toleration, tolerated):
    assert tolerates(toleration, A100_TAINT) is tolerated


def test_empty_selector_selects_every_node_without_untolerated_taints():
    nodes = [node("a"), node("b", taints=[A100_TAINT])]
    assert [n.name for n in engine.platform_nodes(node_selector={}, tolerations=[], nodes=nodes)] == ["a"]


# ---------------------------------------------------------------------------------------------------
# Resource validation

def rule(operator, left, right, message="failed"):
    return Rule(operator=operator, left=left, right=right, message=message)


@pytest.mark.parametrize("operator, left, right, holds", [
    ("GT", "2", "1", True), ("GT", "1", "1", False),
    ("GE", "1", "1", True), ("GE", "0", "1", False),
    ("LT", "1", "2", True), ("LT", "2", "2", False),
    ("LE", "2", "2", True), ("LE", "3", "2", False),
    ("EQ", "2", "2", True), ("EQ", "2", "3", False),
])
def test_each_operator(operator, left, right, holds):
    failures = engine.check_rules([rule(operator, "{{USER_GPU}}", right)], values={"USER_GPU": left}, nodes=[])
    assert (failures == []) is holds


@pytest.mark.parametrize("user, limit, holds", [
    ("1Gi", "1024Mi", True), ("1Gi", "1073741824", True), ("1Ti", "1024Gi", True), ("2Ki", "2048", True),
    ("1G", "1000M", True), ("1Gi", "1G", False),          # 1Gi is more than 1G
    ("1T", "1000G", True), ("1k", "1000", True), ("1M", "1000k", True),
])
def test_memory_units_compare_as_quantities(user, limit, holds):
    failures = engine.check_rules([rule("EQ", "{{USER_MEMORY}}", limit)], values={"USER_MEMORY": user}, nodes=[])
    assert (failures == []) is holds


def test_kilo_is_k_as_in_kubernetes_and_an_upper_case_k_is_refused():
    failure, = engine.check_rules([rule("EQ", "{{USER_MEMORY}}", "1000")], values={"USER_MEMORY": "1K"}, nodes=[])
    assert failure.reasons[0].startswith("USER_MEMORY '1K' is not a quantity")
    with pytest.raises(engine.RuleError, match="not a quantity"):
        engine.parse_rules([{"operator": "LE", "left_operand": "{{USER_MEMORY}}", "right_operand": "1K"}])


def test_cpu_millicores_compare_with_cores_of_the_node():
    nodes = [node("cpu-1", cpu_millis=1500)]
    ok = engine.check_rules([rule("LE", "{{USER_CPU}}", "{{K8_CPU}}")], values={"USER_CPU": "1500m"}, nodes=nodes)
    too_much = engine.check_rules([rule("LE", "{{USER_CPU}}", "{{K8_CPU}}")], values={"USER_CPU": "1.6"}, nodes=nodes)
    assert ok == []
    assert too_much[0].reasons == ("cpu-1: K8_CPU 1500m < USER_CPU 1.6",)


def test_memory_of_nodes_in_bytes_against_gi():
    nodes = [node("mem-1", memory_bytes=32 * GI)]
    rules = [rule("LT", "{{USER_MEMORY}}", "{{K8_MEMORY}}", "Memory {{USER_MEMORY}} exceeds node capacity {{K8_MEMORY}}")]
    assert engine.check_rules(rules, values={"USER_MEMORY": "31Gi"}, nodes=nodes) == []
    failure, = engine.check_rules(rules, values={"USER_MEMORY": "32Gi"}, nodes=nodes)
    assert failure.message == "Memory 32Gi exceeds node capacity 32Gi"
    assert failure.reasons == ("mem-1: K8_MEMORY 32Gi = USER_MEMORY 32Gi",)


def test_a_rule_satisfied_by_one_node_only_passes():
    nodes = [node("gpu-node-1", gpus=1, memory_bytes=64 * GI), node("gpu-node-2", gpus=8, memory_bytes=512 * GI),
             node("gpu-node-3", gpus=2, memory_bytes=64 * GI)]
    rules = engine.parse_rules(engine.DEFAULT_RULE_SETS["default_gpu"] + engine.DEFAULT_RULE_SETS["default_memory"])
    assert engine.check_rules(rules, values={"USER_GPU": "8", "USER_MEMORY": "256Gi"}, nodes=nodes) == []


def test_all_node_rules_must_hold_on_the_same_node():
    # gpu-node-1 has the GPUs, gpu-node-2 the memory: no single node has both.
    nodes = [node("gpu-node-1", gpus=8, memory_bytes=64 * GI), node("gpu-node-2", gpus=1, memory_bytes=512 * GI)]
    rules = engine.parse_rules(engine.DEFAULT_RULE_SETS["default_gpu"] + engine.DEFAULT_RULE_SETS["default_memory"])
    failures = engine.check_rules(rules, values={"USER_GPU": "8", "USER_MEMORY": "256Gi"}, nodes=nodes)
    assert [f.message for f in failures] == ["GPU 8 exceeds node capacity 8", "Memory 256Gi exceeds node capacity 512Gi"]
    assert failures[0].reasons == ("gpu-node-2: K8_GPU 1 < USER_GPU 8",)
    assert failures[1].reasons == ("gpu-node-1: K8_MEMORY 64Gi < USER_MEMORY 256Gi",)


def test_a_rule_no_node_satisfies_lists_every_node_and_why():
    nodes = [node("gpu-node-3", gpus=2), node("gpu-node-4", gpus=Decimal("0"))]
    rules = engine.parse_rules(engine.DEFAULT_RULE_SETS["default_gpu"])
    failure, = engine.check_rules(rules, values={"USER_GPU": "4"}, nodes=nodes)
    assert failure.message == "GPU 4 exceeds node capacity 2"
    assert failure.reasons == ("gpu-node-3: K8_GPU 2 < USER_GPU 4", "gpu-node-4: K8_GPU 0 < USER_GPU 4")
    assert str(failure) == (
        "4 GPUs requested: no node of the pool has that many free. The most free on one node is 2 GPUs; free per "
        "node now: gpu-node-3 2, gpu-node-4 0. The pool's rule: GPU 4 exceeds node capacity 2 (gpu-node-3: K8_GPU 2 "
        "< USER_GPU 4; gpu-node-4: K8_GPU 0 < USER_GPU 4)")


def test_a_refusal_says_in_words_what_was_asked_and_what_the_pool_has_free():
    # The demo's case: 8 GPUs in `default`, one node busy (0 free of 4), one idle (4 free of 4).
    nodes = [node("v100-01", gpus=0, gpu_allocatable=4, pool="default"),
             node("v100-02", gpus=4, gpu_allocatable=4, pool="default")]
    failure, = engine.check_rules(engine.parse_rules(engine.DEFAULT_RULE_SETS["default_gpu"]), values={"USER_GPU": "8"},
                                  nodes=nodes)
    said = str(failure)
    assert said.startswith("8 GPUs requested: no node of pool default has that many free. The most free on one node "
                           "is 4 GPUs, of its 4; free per node now: v100-02 4 of 4, v100-01 0 of 4. ")
    # The rule's own message and variables follow, for the administrator; the engine's rule language is kept.
    assert said.endswith("The pool's rule: GPU 8 exceeds node capacity 4 (v100-01: K8_GPU 0 < USER_GPU 8; "
                         "v100-02: K8_GPU 4 < USER_GPU 8)")
    assert failure.message == "GPU 8 exceeds node capacity 4"


def test_a_refusal_of_one_gpu_and_of_memory_agree_in_number():
    nodes = [node("n1", gpus=0, gpu_allocatable=1, memory_bytes=16 * GI, memory_allocatable_bytes=64 * GI, pool="p")]
    rules = engine.parse_rules(engine.DEFAULT_RULE_SETS["default_gpu"] + engine.DEFAULT_RULE_SETS["default_memory"])
    gpu, memory = engine.check_rules(rules, values={"USER_GPU": "1", "USER_MEMORY": "32Gi"}, nodes=nodes)
    assert str(gpu).startswith("1 GPU requested: no node of pool p has that many free. The most free on one node is "
                               "0 GPUs, of its 1; free per node now: n1 0 of 1.")
    assert str(memory).startswith("32Gi of memory requested: no node of pool p has that many free. The most free on "
                                  "one node is 16Gi of memory, of its 64Gi; free per node now: n1 16Gi of 64Gi.")


def test_a_node_with_enough_gpus_but_not_the_memory_is_said_so():
    # gpu-node-1 has the GPUs, gpu-node-2 the memory: no single node has both.
    nodes = [node("gpu-node-1", gpus=8, gpu_allocatable=8, memory_bytes=64 * GI, pool="p"),
             node("gpu-node-2", gpus=1, gpu_allocatable=8, memory_bytes=512 * GI, pool="p")]
    rules = engine.parse_rules(engine.DEFAULT_RULE_SETS["default_gpu"] + engine.DEFAULT_RULE_SETS["default_memory"])
    gpu, memory = engine.check_rules(rules, values={"USER_GPU": "8", "USER_MEMORY": "256Gi"}, nodes=nodes)
    assert str(gpu).startswith("8 GPUs requested: node gpu-node-1 of pool p has that many free but not the rest of "
                               "what is asked. The pool's rule: GPU 8 exceeds node capacity 8")
    assert str(memory).startswith("256Gi of memory requested: node gpu-node-2 of pool p has that many free but not "
                                  "the rest of what is asked.")


def test_a_rule_other_than_request_against_free_keeps_its_own_message():
    rules = engine.parse_rules([{"operator": "LT", "left_operand": "{{USER_MEMORY}}", "right_operand": "{{K8_MEMORY}} * 0.8",
                                 "assert_message": "Memory {{USER_MEMORY}} exceeds 80% of node capacity"}])
    failure, = engine.check_rules(rules, values={"USER_MEMORY": "81Gi"}, nodes=[node("n", memory_bytes=100 * GI)])
    assert str(failure) == "Memory 81Gi exceeds 80% of node capacity (n: K8_MEMORY 100Gi × 0.8 < USER_MEMORY 81Gi)"


def test_node_rules_fail_on_a_platform_without_nodes():
    failure, = engine.check_rules(engine.parse_rules(engine.DEFAULT_RULE_SETS["default_cpu"][:1]),
                                  values={"USER_CPU": "1"}, nodes=[])
    assert failure.reasons == ("the platform has no nodes",)


def test_static_rules_fail_with_their_message():
    rules = engine.parse_rules(engine.DEFAULT_RULE_SETS["default_cpu"])
    failure, = engine.check_rules(rules, values={"USER_CPU": "0"}, nodes=[node("n", cpu_millis=4000)])
    assert failure.message == "CPU 0 must be greater than 0"


def test_storage_unknown_on_a_node_is_not_held_against_it():
    rules = engine.parse_rules(engine.DEFAULT_RULE_SETS["default_storage"])
    assert engine.check_rules(rules, values={"USER_STORAGE": "10Gi"}, nodes=[node("n")]) == []
    failure, = engine.check_rules(rules, values={"USER_STORAGE": "10Gi"}, nodes=[node("n", storage_bytes=5 * GI)])
    assert failure.reasons == ("n: K8_STORAGE 5Gi < USER_STORAGE 10Gi",)


def test_factor_of_a_node_value():
    rules = engine.parse_rules([{"operator": "LT", "left_operand": "{{USER_MEMORY}}", "right_operand": "{{K8_MEMORY}} * 0.8",
                                 "assert_message": "Memory {{USER_MEMORY}} exceeds 80% of node capacity"}])
    nodes = [node("n", memory_bytes=100 * GI)]
    assert engine.check_rules(rules, values={"USER_MEMORY": "79Gi"}, nodes=nodes) == []
    assert engine.check_rules(rules, values={"USER_MEMORY": "81Gi"}, nodes=nodes)[0].message == \
        "Memory 81Gi exceeds 80% of node capacity"


def test_a_user_value_that_is_not_a_quantity_fails_clearly():
    failure, = engine.check_rules(engine.parse_rules(engine.DEFAULT_RULE_SETS["default_cpu"][1:]),
                                  values={"USER_CPU": "lots"}, nodes=[])
    assert failure.reasons[0].startswith("USER_CPU 'lots' is not a quantity")


@pytest.mark.parametrize("raw, field, words", [
    ([{"operator": "NE", "left_operand": "{{USER_CPU}}", "right_operand": "1"}], "rules[0].operator", "not one of GT, GE, LT, LE, EQ"),
    ([{"operator": "LE", "left_operand": "{{USER_CPUS}}", "right_operand": "1"}], "rules[0].left_operand", "unknown variable 'USER_CPUS'"),
    ([{"operator": "LE", "left_operand": "{{USER_CPU}}", "right_operand": "12 cores"}], "rules[0].right_operand", "neither a variable"),
    ([{"operator": "LE", "left_operand": "{{USER_MEMORY}}", "right_operand": "1GB"}], "rules[0].right_operand", "not a quantity"),
    ([{"operator": "LE", "right_operand": "1"}], "rules[0].left_operand", "is required"),
    ([{"operator": "LE", "left_operand": "1", "right_operand": "2"}], "rules[0].left_operand", "at least one variable"),
    ([{"operator": "LE", "left_operand": "{{USER_CPU}}", "right_operand": "1", "assert_message": "{{K8_FOO}}"}],
     "rules[0].assert_message", "unknown variable 'K8_FOO'"),
    ({"operator": "LE"}, "rules", "must be a list"),
])
def test_malformed_rules_are_refused_naming_the_field(raw, field, words):
    with pytest.raises(engine.RuleError) as caught:
        engine.parse_rules(raw)
    assert caught.value.field == field
    assert words in str(caught.value)


def test_shipped_rule_sets_are_osmos():
    assert set(engine.DEFAULT_RULE_SETS) >= {"default_cpu", "default_memory", "default_storage"}
    for rules in engine.DEFAULT_RULE_SETS.values():
        assert engine.parse_rules(rules)
    assert engine.DEFAULT_RULE_SETS["default_memory"][0] == {
        "operator": "LT", "left_operand": "{{USER_MEMORY}}", "right_operand": "{{K8_MEMORY}}",
        "assert_message": "Memory {{USER_MEMORY}} exceeds node capacity {{K8_MEMORY}}"}


# ---------------------------------------------------------------------------------------------------
# What a platform forbids

def test_privileged_host_network_and_mounts_where_not_allowed():
    spec = {"hostNetwork": True,
            "containers": [{"name": "train", "securityContext": {"privileged": True}}, {"name": "sidecar"}],
            "initContainers": [{"name": "setup", "securityContext": {"privileged": True}}],
            "volumes": [{"name": "data", "hostPath": {"path": "/data"}}, {"name": "etc", "hostPath": {"path": "/etc"}},
                        {"name": "shm", "emptyDir": {}}]}
    problems = engine.platform_violations(spec, privileged_allowed=False, host_network_allowed=False,
                                          allowed_mounts=["/data"])
    assert problems == [
        "spec.hostNetwork is true, but this platform does not allow host networking.",
        "Container 'setup' (initContainers) sets securityContext.privileged, but this platform does not allow privileged containers.",
        "Container 'train' (containers) sets securityContext.privileged, but this platform does not allow privileged containers.",
        "Volume 'etc' mounts host path '/etc', which this platform does not allow (allowed host mounts: /data).",
    ]
    assert engine.platform_violations({"spec": spec}, privileged_allowed=True, host_network_allowed=True,
                                      allowed_mounts=["/data", "/etc"]) == []
