"""Every body-taking endpoint of the API, sent what an attacker sends: an oversized body, nesting past the
limit, a NUL, the wrong types, and (where a field takes YAML) the "billion laughs" and 10,000 levels.

The endpoints are enumerated from the OpenAPI schema when the test runs (every operation with a request
body): one without a row in ENDPOINTS fails `test_every_body_taking_endpoint_is_covered`, naming it, so
an endpoint added later is covered too. Each row gives a valid body (accepted, proven by
`test_the_valid_body_is_accepted`), which the cases then spoil. Every case checks the status and the
message, that nothing was stored (the row count of every model) or written to the cluster (the
emulator's resourceVersion), and that the server answers the next request.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable

import pytest

from tests.hostile.conftest import BOMB, DEEP_YAML, nested_json, snapshot

pytestmark = pytest.mark.django_db


@pytest.fixture
def world(kept_world):
    """The hostile world, built once for this module (its 160-odd cases only send requests): each case's rows are
    rolled back; what a valid body wrote in the emulator stays."""
    return kept_world


@dataclass(frozen=True)
class Endpoint:
    url: Callable[[Any], str]
    valid: Callable[[Any], dict]
    yaml_fields: tuple[str, ...] = ()
    if_match: bool = False  # the write needs If-Match with the ETag of a GET of the same URL
    statuses: tuple[int, ...] = field(default=(200, 201, 202))


def _quotas(w):
    return {"quotas": [{"pool": w.org.a100.pk, "gpu_deserved": "1.5"}]}


ENDPOINTS: dict[tuple[str, str], Endpoint] = {
    ("POST", "/api/v1/clusters/"): Endpoint(lambda w: "/api/v1/clusters/", lambda w: {"name": "other"}),
    ("PATCH", "/api/v1/clusters/{id}/"): Endpoint(lambda w: f"/api/v1/clusters/{w.cluster.pk}/",
                                                  lambda w: {"description": "the lab"}),
    ("PUT", "/api/v1/clusters/{id}/enforcement/"): Endpoint(lambda w: f"/api/v1/clusters/{w.cluster.pk}/enforcement/",
                                                            lambda w: {"enforcer": "none"}),
    ("POST", "/api/v1/departments/"): Endpoint(lambda w: "/api/v1/departments/",
                                               lambda w: {"cluster": w.cluster.pk, "name": "new-dep"}),
    ("PATCH", "/api/v1/departments/{id}/"): Endpoint(lambda w: f"/api/v1/departments/{w.org.rnd.pk}/",
                                                     lambda w: {"description": "research"}),
    ("PUT", "/api/v1/departments/{id}/priority/"): Endpoint(lambda w: f"/api/v1/departments/{w.org.rnd.pk}/priority/",
                                                            lambda w: {"pools": [w.org.a100.pk]}),
    ("PUT", "/api/v1/departments/{id}/quotas/"): Endpoint(lambda w: f"/api/v1/departments/{w.org.rnd.pk}/quotas/",
                                                          _quotas, if_match=True),
    ("POST", "/api/v1/node-pools/"): Endpoint(lambda w: "/api/v1/node-pools/", lambda w: {
        "cluster": w.cluster.pk, "name": "h100", "label_key": "gpu-type", "label_value": "H100"}),
    ("PATCH", "/api/v1/node-pools/{id}/"): Endpoint(lambda w: f"/api/v1/node-pools/{w.org.a100.pk}/",
                                                    lambda w: {"description": "A100 nodes"}),
    ("POST", "/api/v1/node-pools/{id}/gpu-shape/"): Endpoint(
        lambda w: f"/api/v1/node-pools/{w.org.a100.pk}/gpu-shape/", lambda w: {"mig_config": "all-1g.10gb"}),
    ("POST", "/api/v1/nodes/{id}/move/"): Endpoint(
        lambda w: f"/api/v1/nodes/{w.cluster.nodes.get(name='v100-1').pk}/move/", lambda w: {"pool": w.org.a100.pk}),
    ("POST", "/api/v1/platforms/"): Endpoint(lambda w: "/api/v1/platforms/", lambda w: {
        "pool": w.org.a100.pk, "name": "a100-big", "node_selector": "gpu-type: A100", "tolerations": [],
        "default_variables": {"USER_GPU": 1}},
        yaml_fields=("node_selector", "tolerations", "allowed_mounts", "default_variables")),
    ("PATCH", "/api/v1/platforms/{id}/"): Endpoint(lambda w: f"/api/v1/platforms/{w.platform.pk}/", lambda w: {
        "description": "A100 nodes", "node_selector": {"gpu-type": "A100"}},
        yaml_fields=("node_selector", "tolerations", "allowed_mounts", "default_variables")),
    ("POST", "/api/v1/pod-templates/"): Endpoint(lambda w: "/api/v1/pod-templates/", lambda w: {
        "cluster": w.cluster.pk, "name": "spot", "body": "spec:\n  tolerations: []\n"}, yaml_fields=("body",)),
    ("PATCH", "/api/v1/pod-templates/{id}/"): Endpoint(lambda w: f"/api/v1/pod-templates/{w.pod_template.pk}/",
                                                       lambda w: {"description": "A100 only", "body": {"spec": {}}},
                                                       yaml_fields=("body",)),
    ("POST", "/api/v1/projects/"): Endpoint(lambda w: "/api/v1/projects/",
                                            lambda w: {"department": w.org.rnd.pk, "name": "new-proj"}),
    ("PATCH", "/api/v1/projects/{id}/"): Endpoint(lambda w: f"/api/v1/projects/{w.org.rnd_a.pk}/",
                                                  lambda w: {"description": "vision"}),
    ("PUT", "/api/v1/projects/{id}/priority/"): Endpoint(lambda w: f"/api/v1/projects/{w.org.rnd_a.pk}/priority/",
                                                         lambda w: {"pools": [w.org.a100.pk]}),
    ("PUT", "/api/v1/projects/{id}/quotas/"): Endpoint(lambda w: f"/api/v1/projects/{w.org.rnd_a.pk}/quotas/",
                                                       _quotas, if_match=True),
    ("POST", "/api/v1/rates/"): Endpoint(lambda w: "/api/v1/rates/", lambda w: {
        "gpu_model": "NVIDIA-H100-80GB-HBM3", "currency": "EUR", "valid_from": "2026-02-01", "gpu_hour": "4.20"}),
    ("PATCH", "/api/v1/rates/{id}/"): Endpoint(lambda w: f"/api/v1/rates/{w.rate.pk}/",
                                               lambda w: {"description": "list price", "version": w.rate.version}),
    ("POST", "/api/v1/role-assignments/"): Endpoint(lambda w: "/api/v1/role-assignments/", lambda w: {
        "user": "nobody", "role": "viewer", "project": w.org.rnd_a.pk}),
    ("POST", "/api/v1/rule-sets/"): Endpoint(lambda w: "/api/v1/rule-sets/", lambda w: {
        "cluster": w.cluster.pk, "name": "small", "rules": "- operator: LE\n  left_operand: '{{USER_GPU}}'\n"
                                                               "  right_operand: '2'\n"}, yaml_fields=("rules",)),
    ("PATCH", "/api/v1/rule-sets/{id}/"): Endpoint(lambda w: f"/api/v1/rule-sets/{w.rule_set.pk}/",
                                                   lambda w: {"description": "GPUs"}, yaml_fields=("rules",)),
    ("POST", "/api/v1/workloads/"): Endpoint(lambda w: "/api/v1/workloads/", lambda w: {
        "project": w.org.rnd_a.pk, "pools": ["a100"], "image": "busybox", "command": "python train.py --epochs 3",
        "dry_run": True}),
}


def body_taking_operations() -> set[tuple[str, str]]:
    from drf_spectacular.generators import SchemaGenerator

    schema = SchemaGenerator().get_schema(request=None, public=True)
    return {(method.upper(), path) for path, item in schema["paths"].items()
            for method, operation in item.items() if isinstance(operation, dict) and "requestBody" in operation}


def test_every_body_taking_endpoint_is_covered():
    operations = body_taking_operations()
    missing = sorted(operations - set(ENDPOINTS))
    stale = sorted(set(ENDPOINTS) - operations)
    assert not missing, f"Body-taking endpoints without a row in tests/hostile/test_endpoints.py ENDPOINTS: {missing}"
    assert not stale, f"Rows for endpoints that no longer take a body: {stale}"


def send(world, key: tuple[str, str], raw: bytes | str, client=None):
    method, _ = key
    endpoint = ENDPOINTS[key]
    client = client or world.api()
    url = endpoint.url(world)
    headers = {}
    if endpoint.if_match:
        headers["HTTP_IF_MATCH"] = client.get(url)["ETag"]
    return getattr(client, method.lower())(url, data=raw, content_type="application/json", **headers)


def _first_string(value: Any, path: tuple = ()) -> tuple | None:
    if isinstance(value, str):
        return path
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, child in items:
        found = _first_string(child, path + (key,))
        if found is not None:
            return found
    return None


def _with(value: Any, path: tuple, new: Any) -> Any:
    if not path:
        return new
    copy = json.loads(json.dumps(value))
    target = copy
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = new
    return copy


KEYS = sorted(ENDPOINTS)
IDS = [f"{m} {p}" for m, p in KEYS]


@pytest.mark.parametrize("key", KEYS, ids=IDS)
def test_the_valid_body_is_accepted(world, key):
    response = send(world, key, json.dumps(ENDPOINTS[key].valid(world)))
    assert response.status_code in ENDPOINTS[key].statuses, response.content[:500]


@pytest.mark.parametrize("key", KEYS, ids=IDS)
def test_an_oversized_body_is_refused_before_it_is_read(world, key, settings):
    check = snapshot(world)
    body = ENDPOINTS[key].valid(world)
    body["padding"] = "x" * (settings.CONSOLE_MAX_BODY_BYTES + 1)
    response = send(world, key, json.dumps(body))
    assert response.status_code == 413
    answer = response.json()
    assert "at most 1 MiB (1048576 bytes)" in answer["detail"]
    assert answer["errors"] == {"request_body": ["At most 1048576 bytes (1 MiB)."]}
    check()


@pytest.mark.parametrize("key", KEYS, ids=IDS)
def test_nesting_past_the_limit_is_refused_naming_the_field(world, key):
    check = snapshot(world)
    for raw, field in ((nested_json(3000), "non_field_errors"), (nested_json(65), "non_field_errors"),
                       (json.dumps({**ENDPOINTS[key].valid(world), "deep": json.loads(nested_json(64))}), "deep")):
        response = send(world, key, raw)
        assert response.status_code == 400, response.content[:300]
        answer = response.json()
        assert list(answer["errors"]) == [field]
        assert "Nested deeper than 64 levels" in answer["errors"][field][0]
        assert answer["detail"].startswith("Invalid input:")
    check()


@pytest.mark.parametrize("key", KEYS, ids=IDS)
def test_a_nul_is_refused_naming_the_field(world, key):
    check = snapshot(world)
    valid = ENDPOINTS[key].valid(world)
    path = _first_string(valid)
    cases = [({**valid, "comment": "a\x00b"}, "comment"), ({**valid, "x\x01": "key with a control character"}, "x\x01")]
    if path is not None:
        cases.append((_with(valid, path, "spoiled\x00"), path[0]))
    for body, field in cases:
        response = send(world, key, json.dumps(body))
        assert response.status_code == 400, response.content[:300]
        errors = response.json()["errors"]
        assert list(errors) == [field]
        assert "control character U+0000 (NUL)" in errors[field][0] or "U+0001" in errors[field][0]
    check()


@pytest.mark.parametrize("key", KEYS, ids=IDS)
def test_the_wrong_types_are_refused(world, key):
    check = snapshot(world)
    valid = ENDPOINTS[key].valid(world)
    first = next(iter(valid))
    for raw in (json.dumps([1, 2]), json.dumps("text"), json.dumps(7), "{not json",
                json.dumps({**valid, first: {"an": ["object"]}}), json.dumps({**valid, first: [["a", "list"]]})):
        response = send(world, key, raw)
        assert response.status_code == 400, (raw[:60], response.content[:300])
        answer = response.json()
        assert answer["detail"] and "errors" in answer or "JSON" in answer["detail"], answer
    check()


YAML_CASES = [(key, name) for key in KEYS for name in ENDPOINTS[key].yaml_fields]


@pytest.mark.parametrize("key,field", YAML_CASES, ids=[f"{m} {p} {f}" for (m, p), f in YAML_CASES])
def test_yaml_bombs_and_deep_yaml_are_refused_naming_the_field(world, key, field):
    check = snapshot(world)
    valid = ENDPOINTS[key].valid(world)
    for text, rule in ((BOMB, "YAML anchors and aliases (&name, *name) are not accepted"),
                       (DEEP_YAML, "Nested deeper than 64 levels"),
                       ("a: 1\n---\nb: 2\n", "One YAML document only")):
        response = send(world, key, json.dumps({**valid, field: text}))
        assert response.status_code == 400, response.content[:300]
        errors = response.json()["errors"]
        assert list(errors) == [field], errors
        assert rule in errors[field][0]
    check()


@pytest.mark.parametrize("key", KEYS, ids=IDS)
def test_form_encoded_bodies_are_bounded_too(world, key):
    """The same rules when the body is a form (multipart): a NUL in a field, and JSON or YAML text of a
    document field parsed with the same bounds."""
    check = snapshot(world)
    method, _ = key
    endpoint = ENDPOINTS[key]
    client = world.api()
    headers = {"HTTP_IF_MATCH": client.get(endpoint.url(world))["ETag"]} if endpoint.if_match else {}
    if method != "POST":
        return  # Django's test client encodes PUT and PATCH forms only as the caller gives them
    response = client.post(endpoint.url(world), {"comment": "a\x00b"}, format="multipart", **headers)
    assert response.status_code == 400 and list(response.json()["errors"]) == ["comment"]
    for field in endpoint.yaml_fields:
        for text in (BOMB, nested_json(3000)):
            data = {k: v for k, v in endpoint.valid(world).items() if not isinstance(v, (dict, list))}
            response = client.post(endpoint.url(world), {**data, field: text}, format="multipart", **headers)
            assert response.status_code == 400, response.content[:300]
            assert field in response.json()["errors"]
    check()


def test_ids_past_64_bits_are_unknown_ids_not_errors(world):
    """orjson reads integers past 64 bits as floats: an id field answers as for any unknown id."""
    check = snapshot(world)
    key = ("POST", "/api/v1/nodes/{id}/move/")
    for pool in (2**70, 1e300, 1.5, -(2**64)):
        response = send(world, key, json.dumps({"pool": pool}))
        assert response.status_code == 400, response.content[:300]
        assert list(response.json()["errors"]) == ["pool"]
    check()
