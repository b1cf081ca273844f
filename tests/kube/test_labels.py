"""kube.labels against upstream's own cases, transcribed:

- k8s.io/apimachinery/pkg/labels/selector_test.go (TestSelectorParse, TestSelectorMatches,
  TestRequirementConstructor, TestRequirementSelectorMatching, TestSetSelectorParser);
- k8s.io/component-helpers/scheduling/corev1/helpers_test.go (TestMatchNodeSelectorTerms);
- k8s.io/component-helpers/scheduling/corev1/nodeaffinity/nodeaffinity_test.go (TestNodeSelectorMatch,
  TestPreferredSchedulingTermsScore, TestNodeSelectorRequirementsAsSelector,
  TestPodMatchesNodeSelectorAndAffinityTerms).
"""
from __future__ import annotations

import pytest

from kube.labels import (
    SelectorError, label_key_errors, label_selector_matches, label_value_errors, node_selector_terms_match,
    parse_selector, pod_matches_node, preferred_node_affinity_score, requirement_errors, requirement_matches,
    selector_matches,
)


def req(key: str, operator: str, *values: str) -> dict:
    return {"key": key, "operator": operator, "values": list(values)}


def node(name: str = "", **labels: str) -> dict:
    return {"metadata": {"name": name, "labels": labels}}


# TestSelectorParse
@pytest.mark.parametrize("text", ["x=a,y=b,z=c", "", "x!=a,y=b", "x=", "x= ", "x=,z= ", "x= ,z= ", "!x", "x>1",
                                  "x>1,z<5"])
def test_parse_accepts_upstreams_good_strings(text: str) -> None:
    parse_selector(text)


@pytest.mark.parametrize("text", ["x=a||y=b", "x==a==b", "!x=a", "x<a", "x in (abc,def),", "x in abc",
                                  "a b", "x=a b"])
def test_parse_refuses_upstreams_bad_strings(text: str) -> None:
    with pytest.raises(SelectorError):
        parse_selector(text)


# TestSelectorMatches
@pytest.mark.parametrize(("text", "labels", "matches"), [
    ("", {"x": "y"}, True), ("x=y", {"x": "y"}, True), ("x=y,z=w", {"x": "y", "z": "w"}, True),
    ("x!=y,z!=w", {"x": "z", "z": "a"}, True), ("notin=in", {"notin": "in"}, True),
    ("x", {"x": "z"}, True), ("!x", {"y": "z"}, True), ("x>1", {"x": "2"}, True), ("x<1", {"x": "0"}, True),
    ("x=z", {}, False), ("x=y", {"x": "z"}, False), ("x=y,z=w", {"x": "w", "z": "w"}, False),
    ("x!=y,z!=w", {"x": "z", "z": "w"}, False), ("x", {"y": "z"}, False), ("!x", {"x": "z"}, False),
    ("x>1", {"x": "0"}, False), ("x<1", {"x": "2"}, False),
    ("foo=bar", {"foo": "bar", "baz": "blah"}, True), ("baz=blah", {"foo": "bar", "baz": "blah"}, True),
    ("foo=bar,baz=blah", {"foo": "bar", "baz": "blah"}, True), ("foo=blah", {"foo": "bar", "baz": "blah"}, False),
    ("baz=bar", {"foo": "bar", "baz": "blah"}, False),
    ("foo=bar,foobar=bar,baz=blah", {"foo": "bar", "baz": "blah"}, False),
])
def test_parsed_selectors_match_as_upstream(text: str, labels: dict, matches: bool) -> None:
    assert selector_matches(parse_selector(text), labels) is matches


# TestSetSelectorParser (the matching part)
@pytest.mark.parametrize(("text", "expected"), [
    ("\rx", [req("x", "Exists")]),
    ("this-is-a-dns.domain.com/key-with-dash", [req("this-is-a-dns.domain.com/key-with-dash", "Exists")]),
    ("this-is-another-dns.domain.com/key-with-dash in (so,what)",
     [req("this-is-another-dns.domain.com/key-with-dash", "In", "so", "what")]),
    ("0.1.2.domain/99 notin (10.10.100.1, tick.tack.clock)",
     [req("0.1.2.domain/99", "NotIn", "10.10.100.1", "tick.tack.clock")]),
    ("foo  in\t (abc)", [req("foo", "In", "abc")]), ("x notin\n (abc)", [req("x", "NotIn", "abc")]),
    ("x in (abc,)", [req("x", "In", "", "abc")]), ("x in ()", [req("x", "In", "")]),
    ("x notin (abc,def),bar,z in (),w",
     [req("x", "NotIn", "abc", "def"), req("bar", "Exists"), req("z", "In", ""), req("w", "Exists")]),
    ("x=a", [req("x", "In", "a")]), ("x>1", [req("x", "Gt", "1")]), ("x<7", [req("x", "Lt", "7")]),
    ("x!=a,y=b", [req("x", "NotIn", "a"), req("y", "In", "b")]),
])
def test_parse_gives_the_requirements(text: str, expected: list) -> None:
    assert parse_selector(text) == expected


# TestRequirementConstructor (as node selector requirements: the same rules)
@pytest.mark.parametrize(("requirement", "valid"), [
    (req("x", "In"), False), (req("x", "NotIn"), False), (req("x", "In", "foo"), True), (req("x", "NotIn", "foo"), True),
    (req("x", "Exists"), True), (req("x", "DoesNotExist"), True), (req("1foo", "In", "bar"), True),
    (req("1234", "In", "bar"), True), (req("y", "Gt", "1"), True), (req("z", "Lt", "6"), True),
    (req("foo", "Gt", "bar"), False), (req("barz", "Lt", "blah"), False), (req("a" * 254, "Exists"), False),
])
def test_requirements_upstream_refuses_to_build_are_invalid(requirement: dict, valid: bool) -> None:
    assert (not requirement_errors(requirement)) is valid


# TestRequirementSelectorMatching
@pytest.mark.parametrize(("labels", "requirements", "matches"), [
    ({"x": "foo", "y": "baz"}, [{"key": "", "operator": "", "values": []}], False),
    ({"x": "foo", "y": "baz"}, [req("x", "In", "foo"), req("y", "NotIn", "alpha")], True),
    ({"x": "foo", "y": "baz"}, [req("x", "In", "foo"), req("y", "In", "alpha")], False),
    ({"y": ""}, [req("x", "NotIn", ""), req("y", "Exists")], True),
    ({"y": ""}, [req("x", "DoesNotExist"), req("y", "Exists")], True),
    ({"y": ""}, [req("x", "NotIn", ""), req("y", "DoesNotExist")], False),
    ({"y": "baz"}, [req("x", "In", "")], False),
    ({"z": "2"}, [req("z", "Gt", "1")], True), ({"z": "v2"}, [req("z", "Gt", "1")], False),
])
def test_requirements_match_as_upstream(labels: dict, requirements: list, matches: bool) -> None:
    assert selector_matches(requirements, labels) is matches


def test_karpenters_gte_and_lte_compare_integers_inclusively() -> None:
    assert requirement_matches(req("karpenter.k8s.aws/instance-gpu-count", "Gte", "4"),
                               {"karpenter.k8s.aws/instance-gpu-count": "4"})
    assert not requirement_matches(req("karpenter.k8s.aws/instance-gpu-count", "Lte", "2"),
                                   {"karpenter.k8s.aws/instance-gpu-count": "4"})
    # A label selector knows only the four set operators.
    assert not label_selector_matches({"matchExpressions": [req("n", "Gt", "1")]}, {"n": "2"})


def test_a_label_selector_none_selects_nothing_and_empty_selects_everything() -> None:
    # metav1.LabelSelectorAsSelector: nil -> labels.Nothing(), empty -> labels.Everything().
    assert not label_selector_matches(None, {"a": "b"})
    assert label_selector_matches({}, {"a": "b"})
    selector = {"matchLabels": {"app": "web"}, "matchExpressions": [req("tier", "NotIn", "db")]}
    assert label_selector_matches(selector, {"app": "web", "tier": "front"})
    assert not label_selector_matches(selector, {"app": "web", "tier": "db"})
    assert not label_selector_matches({"matchExpressions": [req("tier", "In")]}, {"tier": "db"})  # invalid


# TestMatchNodeSelectorTerms
@pytest.mark.parametrize(("terms", "the_node", "matches"), [
    (None, node(), False),
    ([{"matchExpressions": [req("label_1", "In", "label_1_val")]}], node(label_1="label_1_val"), True),
    ([{"matchFields": [req("metadata.name", "In", "host_1")]}], node("host_1"), True),
    ([{"matchFields": [req("metadata.name", "In", "host_1", "host_2")]}], node("host_1"), False),
    ([{"matchFields": [req("metadata.name", "In", "host_1")]}], node("not_host_1", **{"metadata.name": "host_1"}),
     False),
    ([{"matchExpressions": [req("metadata.name", "In", "host_1")]}], node("host_1"), False),
    ([{"matchExpressions": [req("label_1", "In", "label_1_val")],
       "matchFields": [req("metadata.name", "In", "host_1")]}], node("host_1"), False),
    ([{"matchExpressions": [req("label_1", "In", "label_1_val")],
       "matchFields": [req("metadata.name", "In", "host_1")]}], node("host_1", label_1="label_1_val"), True),
    ([{"matchExpressions": [req("label_1", "In", "label_1_val")],
       "matchFields": [req("metadata.name", "In", "host_1")]}], node("host_1", label_1="label_1_val-failed"), False),
    ([{"matchExpressions": [req("label_1", "In", "label_1_val")]},
      {"matchFields": [req("metadata.name", "In", "host_1")]}], node("host_1", label_1="label_1_val-failed"), True),
])
def test_node_selector_terms_match_as_upstream(terms: list | None, the_node: dict, matches: bool) -> None:
    assert node_selector_terms_match(terms, the_node) is matches


def test_invalid_terms_never_match_and_valid_ones_still_do() -> None:
    # TestNodeSelectorMatch, "invalid field selector and label selector": terms 0 (two names) and 2 (a bad
    # key) are refused by upstream's parser; the lazy selector the scheduler uses skips them.
    terms = [
        {"matchFields": [req("metadata.name", "In", "host_1", "host_2")]},
        {"matchExpressions": [req("label_1", "In", "label_1_val")], "matchFields": [req("metadata.name", "In", "host_1")]},
        {"matchExpressions": [req("invalid key", "In", "label_value")]},
    ]
    assert not node_selector_terms_match(terms, node("host_1"))
    assert node_selector_terms_match(terms, node("host_1", label_1="label_1_val"))
    assert "key: " + label_key_errors("invalid key")[0] in requirement_errors(terms[2]["matchExpressions"][0])


@pytest.mark.parametrize(("terms", "the_node", "matches"), [
    # TestNodeSelectorMatch
    ([{"matchExpressions": [req("label_1", "In", "label_1_val")], "matchFields": [req("metadata.name", "In", "host_1")]}],
     node("host_1"), False),
    ([{"matchExpressions": [req("label_1", "In", "label_1_val")], "matchFields": [req("metadata.name", "In", "host_1")]}],
     node("host_1", label_1="label_1_val"), True),
    ([{"matchExpressions": [req("label_1", "In", "label_1_val")]}, {"matchFields": [req("metadata.name", "In", "host_1")]}],
     node("host_1"), True),
])
def test_node_selector_match(terms: list, the_node: dict, matches: bool) -> None:
    assert node_selector_terms_match(terms, the_node) is matches


def affinity_pod(terms: list | None = None, preferred: list | None = None, node_selector: dict | None = None) -> dict:
    node_affinity: dict = {}
    if terms is not None:
        node_affinity["requiredDuringSchedulingIgnoredDuringExecution"] = {"nodeSelectorTerms": terms}
    if preferred is not None:
        node_affinity["preferredDuringSchedulingIgnoredDuringExecution"] = preferred
    spec: dict = {"affinity": {"nodeAffinity": node_affinity}}
    if node_selector is not None:
        spec["nodeSelector"] = node_selector
    return {"spec": spec}


# TestPreferredSchedulingTermsScore
def test_preferred_terms_score_the_weights_of_the_terms_that_match() -> None:
    preferred = [
        {"weight": 5, "preference": {"matchFields": [req("metadata.name", "In", "host_1")]}},
        {"weight": 7, "preference": {"matchExpressions": [req("unknown_label", "In", "unknown_label_val")]}},
        {"weight": 11, "preference": {"matchExpressions": [req("label_1", "In", "label_1_val")]}},
    ]
    assert preferred_node_affinity_score(affinity_pod(preferred=preferred), node("host_1", label_1="label_1_val")) == 16


def test_an_invalid_preferred_term_without_weight_counts_nothing() -> None:
    preferred = [{"weight": 0, "preference": {"matchFields": [req("metadata.name", "In", "host_1", "host_2")]}}]
    assert preferred_node_affinity_score(affinity_pod(preferred=preferred), node("host_1")) == 0


# TestNodeSelectorRequirementsAsSelector
def test_requirements_as_selector() -> None:
    assert not node_selector_terms_match([{"matchExpressions": []}], node(foo="bar"))  # nil/empty -> Nothing()
    assert requirement_matches(req("foo", "In", "bar", "baz"), {"foo": "baz"})
    assert requirement_errors(req("foo", "Exists", "bar", "baz")) == [
        "values: Invalid value: values set must be empty for exists and does not exist"]
    assert requirement_matches(req("foo", "Gt", "1"), {"foo": "2"})
    assert requirement_matches(req("bar", "Lt", "7"), {"bar": "6"})


# TestPodMatchesNodeSelectorAndAffinityTerms
@pytest.mark.parametrize(("pod", "labels", "node_name", "matches"), [
    ({}, {}, "", True),
    ({"spec": {"nodeSelector": {"foo": "bar"}}}, {}, "", False),
    ({"spec": {"nodeSelector": {"foo": "bar"}}}, {"foo": "bar"}, "", True),
    ({"spec": {"nodeSelector": {"foo": "bar"}}}, {"foo": "bar", "baz": "blah"}, "", True),
    ({"spec": {"nodeSelector": {"foo": "bar", "baz": "blah"}}}, {"foo": "bar"}, "", False),
    (affinity_pod([{"matchExpressions": [req("foo", "In", "bar", "value2")]}]), {"foo": "bar"}, "", True),
    (affinity_pod([{"matchExpressions": [req("kernel-version", "Gt", "0204")]}]), {"kernel-version": "0206"}, "", True),
    (affinity_pod([{"matchExpressions": [req("mem-type", "NotIn", "DDR", "DDR2")]}]), {"mem-type": "DDR3"}, "", True),
    (affinity_pod([{"matchExpressions": [req("GPU", "Exists")]}]), {"GPU": "NVIDIA-GRID-K1"}, "", True),
    (affinity_pod([{"matchExpressions": [req("foo", "In", "value1", "value2")]}]), {"foo": "bar"}, "", False),
    (affinity_pod(None), {"foo": "bar"}, "", True),
    ({"spec": {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": None}}}}},
     {"foo": "bar"}, "", False),
    (affinity_pod([]), {"foo": "bar"}, "", False),
    (affinity_pod([{"matchExpressions": []}]), {"foo": "bar"}, "", False),
    ({}, {"foo": "bar"}, "", True),
    ({"spec": {"affinity": {"nodeAffinity": {}}}}, {"foo": "bar"}, "", True),
    (affinity_pod([{"matchExpressions": [req("GPU", "Exists"), req("GPU", "NotIn", "AMD", "INTER")]}]),
     {"GPU": "NVIDIA-GRID-K1"}, "", True),
    (affinity_pod([{"matchExpressions": [req("GPU", "Exists"), req("GPU", "In", "AMD", "INTER")]}]),
     {"GPU": "NVIDIA-GRID-K1"}, "", False),
    (affinity_pod([{"matchExpressions": [req("foo", "In", "bar", "value2")]},
                   {"matchExpressions": [req("diffkey", "In", "wrong", "value2")]}]), {"foo": "bar"}, "", True),
    (affinity_pod([{"matchExpressions": [req("foo", "Exists")]}], node_selector={"foo": "bar"}), {"foo": "bar"}, "", True),
    (affinity_pod([{"matchExpressions": [req("foo", "Exists")]}], node_selector={"foo": "bar"}),
     {"foo": "barrrrrr"}, "", False),
    (affinity_pod([{"matchExpressions": [req("foo", "NotIn", "invalid value: ___@#$%^")]}]), {"foo": "bar"}, "", False),
    (affinity_pod([{"matchFields": [req("metadata.name", "In", "node_1")]}]), {}, "node_1", True),
    (affinity_pod([{"matchFields": [req("metadata.name", "In", "node_1")]}]), {}, "node_2", False),
    (affinity_pod([{"matchFields": [req("metadata.name", "In", "node_1")]},
                   {"matchExpressions": [req("foo", "In", "bar")]}]), {"foo": "bar"}, "node_2", True),
    (affinity_pod([{"matchFields": [req("metadata.name", "In", "node_1")],
                    "matchExpressions": [req("foo", "In", "bar")]}]), {"foo": "bar"}, "node_2", False),
    (affinity_pod([{"matchFields": [req("metadata.name", "In", "node_1")],
                    "matchExpressions": [req("foo", "In", "bar")]}]), {"foo": "bar"}, "node_1", True),
    (affinity_pod([{"matchFields": [req("metadata.name", "In", "node_1")]},
                   {"matchExpressions": [req("foo", "In", "not-match-to-bar")]}]), {"foo": "bar"}, "node_2", False),
])
def test_pod_matches_node_selector_and_affinity_terms(pod: dict, labels: dict, node_name: str, matches: bool) -> None:
    assert pod_matches_node(pod, node(node_name, **labels)) is matches


@pytest.mark.parametrize(("key", "errors"), [
    ("gpu-type", []), ("karpenter.sh/nodepool", []), ("Bad Key", ["name part must consist"]),
    ("/x", ["prefix part must be non-empty"]), ("a/b/c", ["a qualified name must consist"]),
    ("x" * 64, ["name part must be no more than 63 characters"]),
])
def test_label_keys_are_checked_in_the_api_servers_words(key: str, errors: list[str]) -> None:
    found = label_key_errors(key)
    assert len(found) >= len(errors) and all(f.startswith(e) for f, e in zip(found, errors))
    assert not label_value_errors("A100") and label_value_errors("-x")
    # A final newline is no part of a valid key or value (Go's regexp has no `$` before a newline).
    assert label_key_errors("gpu-type\n") and label_value_errors("A100\n")
    assert not requirement_matches(req("n", "Gt", "1\n"), {"n": "2"})
