"""How Kubernetes objects are read: names, labels, quantities, pod requests in the console's units, node
reasons (Kubernetes' own rules are `kube`'s, tested against upstream's cases in tests/kube)."""
from decimal import Decimal

import pytest

from kube.labels import dns1123_label_errors, label_key_errors, label_value_errors
from kube.quantity import QuantityError, parse_quantity
from kube.requests import pod_is_active, pod_is_bound
from nodepools import kube


@pytest.mark.parametrize("key", ["gpu-type", "karpenter.sh/nodepool", "nvidia.com/gpu.product", "A", "a" * 63,
                                 "example.com/" + "a" * 63])
def test_valid_label_keys(key):
    assert label_key_errors(key) == []


@pytest.mark.parametrize(
    "key, expected",
    [
        ("GPU Type", "name part must consist of alphanumeric characters"),
        ("a" * 64, "name part must be no more than 63 characters"),
        ("Example.com/gpu", "prefix part a lowercase RFC 1123 subdomain"),
        ("bad_prefix/gpu", "prefix part a lowercase RFC 1123 subdomain"),
        ("/gpu", "prefix part must be non-empty"),
        ("example.com/", "name part must be non-empty"),
        ("a/b/c", "a qualified name must consist of"),
        ("-gpu", "must start and end with an alphanumeric character"),
        ("", "name part must be non-empty"),
    ],
)
def test_invalid_label_keys_say_what_is_wrong(key, expected):
    errors = label_key_errors(key)
    assert errors and expected in errors[0]


@pytest.mark.parametrize("value", ["", "A100", "a100_80gb", "h100.prod", "x" * 63])
def test_valid_label_values(value):
    assert label_value_errors(value) == []


@pytest.mark.parametrize(
    "value, expected",
    [("x" * 64, "must be no more than 63 characters"), ("A100 80GB", "a valid label must be an empty string"),
     ("-a", "a valid label must be an empty string"), ("a.", "a valid label must be an empty string")],
)
def test_invalid_label_values(value, expected):
    assert expected in " ".join(label_value_errors(value))


@pytest.mark.parametrize("name", ["a100-80gb", "default", "rnd", "a", "1-2"])
def test_valid_dns_labels(name):
    assert dns1123_label_errors(name) == []


@pytest.mark.parametrize("name", ["A100", "rnd_team", "-x", "x-", "a.b", "a" * 64, ""])
def test_invalid_dns_labels(name):
    assert dns1123_label_errors(name)


@pytest.mark.parametrize(
    "text, value",
    [("500m", Decimal("0.5")), ("2", Decimal(2)), ("1Gi", Decimal(2**30)), ("129843200Ki", Decimal(129843200 * 1024)),
     ("1e3", Decimal(1000)), ("1.5", Decimal("1.5")), ("100M", Decimal(10**8)), ("0", Decimal(0)), (4, Decimal(4))],
)
def test_quantities(text, value):
    assert parse_quantity(text) == value


@pytest.mark.parametrize("text", ["12x", "", "1.2.3", "Gi", "1 Gi", None, True, "1iG"])
def test_unparsable_quantities_are_reported(text):
    with pytest.raises(QuantityError):
        parse_quantity(text)


def pod(containers=(), init=(), overhead=None):
    def c(requests=None, limits=None, **extra):
        return {"name": "c", "resources": {"requests": requests or {}, "limits": limits or {}}, **extra}

    spec = {"containers": [c(**x) for x in containers], "initContainers": [c(**x) for x in init]}
    if overhead:
        spec["overhead"] = overhead
    return {"metadata": {"name": "p", "namespace": "n"}, "spec": spec}


def test_pod_requests_sum_app_containers():
    r = kube.pod_resources(pod([{"requests": {"cpu": "500m", "memory": "1Gi"}}, {"requests": {"cpu": "1", "memory": "512Mi"}}]))
    assert (r.cpu_millis, r.memory_bytes) == (1500, 1536 * 2**20)


def test_pod_requests_take_the_largest_init_container_when_larger():
    r = kube.pod_resources(pod([{"requests": {"cpu": "1"}}], init=[{"requests": {"cpu": "4"}}, {"requests": {"cpu": "2"}}]))
    assert r.cpu_millis == 4000
    r = kube.pod_resources(pod([{"requests": {"cpu": "3"}}], init=[{"requests": {"cpu": "2"}}]))
    assert r.cpu_millis == 3000


def test_pod_requests_add_overhead():
    r = kube.pod_resources(pod([{"requests": {"cpu": "1", "memory": "1Gi"}}], overhead={"cpu": "250m", "memory": "120Mi"}))
    assert (r.cpu_millis, r.memory_bytes) == (1250, 2**30 + 120 * 2**20)


def test_gpu_limit_without_request_counts_as_request():
    r = kube.pod_resources(pod([{"limits": {"nvidia.com/gpu": "2"}}, {"requests": {"nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "1"}}]))
    assert r.gpus == 3


def test_sidecar_init_containers_run_beside_the_app():
    r = kube.pod_resources(pod([{"requests": {"cpu": "1"}}], init=[{"requests": {"cpu": "500m"}, "restartPolicy": "Always"}]))
    assert r.cpu_millis == 1500


def test_malformed_quantity_in_a_pod_raises_quantity_error():
    with pytest.raises(QuantityError):
        kube.pod_resources(pod([{"requests": {"cpu": "12x"}}]))


@pytest.mark.parametrize(
    "phase, node, active", [("Running", "n1", True), ("Pending", "n1", True), ("Pending", None, False),
                            ("Succeeded", "n1", False), ("Failed", "n1", False)],
)
def test_only_bound_unfinished_pods_count(phase, node, active):
    obj = {"spec": {"nodeName": node}, "status": {"phase": phase}}
    assert (pod_is_bound(obj) and pod_is_active(obj)) is active


def node(conditions, unschedulable=False):
    return {"spec": {"unschedulable": unschedulable},
            "status": {"conditions": [{"type": t, "status": s} for t, s in conditions]}}


@pytest.mark.parametrize(
    "conditions, unschedulable, reasons",
    [
        ([("Ready", "True")], False, []),
        ([("Ready", "False")], False, ["Kubelet not ready"]),
        ([("Ready", "Unknown")], False, ["Node unreachable"]),
        ([("Ready", "True"), ("DiskPressure", "True")], False, ["Disk pressure"]),
        ([("Ready", "True"), ("MemoryPressure", "True")], False, ["Memory pressure"]),
        ([("Ready", "True"), ("PIDPressure", "True")], False, ["PID pressure"]),
        ([("Ready", "True"), ("NetworkUnavailable", "True")], False, ["Network unavailable"]),
        ([("Ready", "True")], True, ["Scheduling disabled"]),
        ([("Ready", "False"), ("DiskPressure", "True"), ("MemoryPressure", "False")], True,
         ["Kubelet not ready", "Disk pressure", "Scheduling disabled"]),
        ([], False, ["Node unreachable"]),
    ],
)
def test_node_condition_reasons(conditions, unschedulable, reasons):
    assert kube.node_condition_reasons(node(conditions, unschedulable)) == reasons


def test_missing_operands_only_on_gpu_nodes_and_not_when_disabled_on_purpose():
    assert kube.missing_operand_reasons({}, False, set()) == []
    assert kube.missing_operand_reasons({}, True, set()) == ["Missing NVIDIA container toolkit", "Missing NVIDIA DCGM exporter"]
    assert kube.missing_operand_reasons({}, True, {kube.TOOLKIT_APP, kube.DCGM_APP}) == []
    disabled = {"nvidia.com/gpu.deploy.container-toolkit": "false", "nvidia.com/gpu.deploy.dcgm-exporter": "false"}
    assert kube.missing_operand_reasons(disabled, True, set()) == []


def test_resolve_pool_first_created_wins_and_reports_the_conflict():
    pools = [("first", "gpu-type", "A100"), ("second", "team", "ml")]
    assert kube.resolve_pool({"gpu-type": "A100"}, pools) == ("first", [])
    assert kube.resolve_pool({"gpu-type": "A100", "team": "ml"}, pools) == ("first", ["first", "second"])
    assert kube.resolve_pool({"gpu-type": "V100"}, pools) == (None, [])
