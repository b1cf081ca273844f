"""kube.taints against upstream's own cases, transcribed: k8s.io/api/core/v1/toleration_test.go
(TestTolerationToleratesTaint) and k8s.io/component-helpers/scheduling/corev1/helpers_test.go
(TestFindMatchingUntoleratedTaint), plus the rules the module states that those tables leave implicit."""
from __future__ import annotations

import pytest

from kube.taints import first_untolerated_taint, taint_text, tolerates, untolerated_taints

NS, NE, PNS = "NoSchedule", "NoExecute", "PreferNoSchedule"
SLA = "node.kubernetes.io/sla"


def tol(key: str = "", operator: str = "", value: str = "", effect: str = "") -> dict:
    return {k: v for k, v in (("key", key), ("operator", operator), ("value", value), ("effect", effect)) if v}


def taint(key: str, value: str = "", effect: str = NS) -> dict:
    return {"key": key, "value": value, "effect": effect} if value else {"key": key, "effect": effect}


# TestTolerationToleratesTaint
@pytest.mark.parametrize(("toleration", "the_taint", "tolerated"), [
    (tol("foo", "Exists", effect=NS), taint("foo"), True),
    (tol("foo", "Exists", effect=NS), taint("foo", "bar"), True),
    (tol("", "Exists", effect=NS), taint("foo", "bar"), True),
    (tol("foo", "Equal", "bar", NS), taint("foo", "bar"), True),
    (tol("foo", "Equal", "value1", NS), taint("foo", "value2"), False),
    (tol("foo", "Equal", "bar", NS), taint("foo", "bar", NE), False),
    (tol(SLA, "Gt", "950", NS), taint(SLA, "800"), False),
    (tol(SLA, "Gt", "750", NS), taint(SLA, "950"), True),
    (tol(SLA, "Lt", "800", NS), taint(SLA, "950"), False),
    (tol(SLA, "Lt", "950", NS), taint(SLA, "800"), True),
    (tol(SLA, "Gt", "950", NS), taint(SLA, "950"), False),
    (tol(SLA, "Gt", "950", NS), taint(SLA, "high"), False),
    (tol("test-key", "Gt", "-100", NS), taint("test-key", "-200"), False),
    (tol("test-key", "Gt", "9223372036854775806", NS), taint("test-key", "100"), False),
])
def test_toleration_tolerates_taint(toleration: dict, the_taint: dict, tolerated: bool) -> None:
    assert tolerates(toleration, the_taint) is tolerated


@pytest.mark.parametrize(("toleration", "the_taint", "tolerated"), [
    (tol("", "Exists"), taint("anything", "at-all", NE), True),  # empty key + Exists + empty effect: all
    (tol("foo", "Exists"), taint("foo", "bar", PNS), True),  # empty effect: every effect
    (tol("foo", value="bar"), taint("foo", "bar"), True),  # no operator is Equal
    (tol("foo", "Equal"), taint("foo"), True),  # both values empty
    (tol("foo", "Equal", "bar"), taint("other", "bar"), False),
    (tol("foo", "Sometimes", "bar"), taint("foo", "bar"), False),  # an unknown operator tolerates nothing
])
def test_the_rules_between_the_lines(toleration: dict, the_taint: dict, tolerated: bool) -> None:
    assert tolerates(toleration, the_taint) is tolerated


# TestFindMatchingUntoleratedTaint (the filter being "NoSchedule or NoExecute", the scheduler's)
@pytest.mark.parametrize(("tolerations", "taints", "untolerated"), [
    ([], [], None),
    ([tol("foo", "Exists", effect=NS)], [], None),
    ([tol("foo", "Exists", effect=NS)], [taint("foo")], None),
    ([tol("foo", "Exists", effect=NS)], [taint("bar")], taint("bar")),
    ([tol(SLA, "Gt", "950", NS)], [taint(SLA, "800")], taint(SLA, "800")),
    ([tol(SLA, "Gt", "750", NS)], [taint(SLA, "950")], None),
    ([tol(SLA, "Lt", "800", NS)], [taint(SLA, "950")], taint(SLA, "950")),
    ([tol(SLA, "Gt", "950", NS)], [taint(SLA, "high")], taint(SLA, "high")),
    ([tol(SLA, "Gt", "950", NS), tol(SLA, "Exists", effect=NS)], [taint(SLA, "high")], None),
])
def test_find_matching_untolerated_taint(tolerations: list, taints: list, untolerated: dict | None) -> None:
    assert first_untolerated_taint(taints, tolerations) == untolerated


def test_a_filter_that_no_taint_passes_leaves_nothing_untolerated() -> None:
    # "tolerations don't match taints, but no taints apply to the filter, expect tolerated"
    assert first_untolerated_taint([taint("bar")], [tol("foo", "Exists", effect=NS)], effects=()) is None
    # "tolerations match taints, expect tolerated": only NoExecute taints are considered.
    taints = [taint("foo", effect=NE), taint("bar", effect=NS)]
    assert untolerated_taints(taints, [tol("foo", "Exists", effect=NE)], effects=(NE,)) == []


def test_prefer_no_schedule_never_keeps_a_pod_off_by_default() -> None:
    taints = [taint("soft", "x", PNS), taint("hard", "y", NE), taint("gpu", effect=NS)]
    assert untolerated_taints(taints, []) == [taint("hard", "y", NE), taint("gpu", effect=NS)]
    assert untolerated_taints(taints, [tol("gpu", "Exists")]) == [taint("hard", "y", NE)]


def test_malformed_entries_are_ignored_rather_than_crashing() -> None:
    assert untolerated_taints([taint("gpu"), "junk", None], ["junk", None, tol("gpu", "Exists")]) == []


def test_taint_text_is_kubectls() -> None:
    assert taint_text(taint("workload-type", "inference")) == "workload-type=inference:NoSchedule"
    assert taint_text(taint("nvidia.com/gpu", effect=NE)) == "nvidia.com/gpu:NoExecute"
