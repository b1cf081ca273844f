"""Tests of the Kubernetes API emulator, over real HTTP with the official ``kubernetes`` client.

No Django needed: run with ``pytest tests/kubesim/test_emulator.py -p no:django``.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import urllib3
from kubernetes import client, config, watch

from kubesim import (
    EXPIRED_CONTINUE_MESSAGE,
    ApiError,
    KubeEmulator,
    SelectorError,
    generate_cluster,
    iter_cluster,
    json_merge_patch,
    json_patch,
    make_node,
    make_pod,
    parse_field_selector,
    parse_label_selector,
    strategic_merge_patch,
)

ROOT = Path(__file__).resolve().parents[2]


# --------------------------------------------------------------------------- fixtures


@pytest.fixture
def kubeconfig(sim: KubeEmulator, tmp_path: Path) -> str:
    return sim.write_kubeconfig(tmp_path / "kubeconfig")


@pytest.fixture
def api(kubeconfig: str) -> Iterator[client.CoreV1Api]:
    api_client = config.new_client_from_config(config_file=kubeconfig, context="emulator")
    try:
        yield client.CoreV1Api(api_client)
    finally:
        api_client.close()


@pytest.fixture
def http() -> Iterator[urllib3.PoolManager]:
    pool = urllib3.PoolManager(retries=False)
    try:
        yield pool
    finally:
        pool.clear()


def gpu_pod(name: str, ns: str, node: str | None, gpus: int = 1, **kw: Any) -> dict[str, Any]:
    return make_pod(
        name, ns, node=node, containers=[{"name": "main", "requests": {"cpu": "1", "nvidia.com/gpu": gpus}}], **kw
    )


def names(items: list[dict[str, Any]]) -> list[str]:
    return [i["metadata"]["name"] for i in items]


def list_all(fn: Any, limit: int, **kw: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Page through a list call with ``_preload_content=False``; returns (items, page metadata)."""
    items, metas, token = [], [], None
    while True:
        body = orjson.loads(fn(limit=limit, _continue=token, _preload_content=False, **kw).data)
        items += body["items"]
        metas.append(body["metadata"])
        token = body["metadata"].get("continue")
        if not token:
            return items, metas


def control(http: urllib3.PoolManager, sim: KubeEmulator, op: str, **body: Any) -> urllib3.BaseHTTPResponse:
    return http.request(
        "POST", f"{sim.url}/_emulator/{op}", body=json.dumps(body), headers={"Content-Type": "application/json"}
    )


# --------------------------------------------------------------------------- config and discovery


def test_kubeconfig_loads_with_both_entry_points(sim: KubeEmulator, kubeconfig: str) -> None:
    sim.add_node(make_node("gpu-1", gpus=8))
    cfg = client.Configuration()
    config.load_kube_config(config_file=kubeconfig, context="emulator", client_configuration=cfg)
    assert cfg.host == sim.url
    with client.ApiClient(cfg) as api_client:
        assert names(client.CoreV1Api(api_client).list_node().to_dict()["items"]) == ["gpu-1"]
        assert client.VersionApi(api_client).get_code().git_version.startswith("v1.")
        assert client.CoreApi(api_client).get_api_versions().versions == ["v1"]
    with config.new_client_from_config(config_file=kubeconfig, context="emulator") as api_client:
        assert client.CoreV1Api(api_client).read_node("gpu-1").kind == "Node"


# --------------------------------------------------------------------------- lists


def test_list_paging_with_continue(sim: KubeEmulator, api: client.CoreV1Api) -> None:
    sim.load(nodes=[make_node(f"node-{i:02d}") for i in range(23)])
    items, metas = list_all(api.list_node, 5)
    assert names(items) == [f"node-{i:02d}" for i in range(23)]
    assert len(metas) == 5
    assert metas[0]["remainingItemCount"] == 18
    assert all(m["resourceVersion"] == str(sim.resource_version) for m in metas)
    assert all("kind" not in i and "apiVersion" not in i for i in items)  # items carry no kind, like the real server
    md = items[0]["metadata"]
    assert md["uid"] and md["creationTimestamp"] and md["resourceVersion"]
    # The deserializing client path works too.
    page = api.list_node(limit=10)
    assert page.kind == "NodeList" and len(page.items) == 10 and page.metadata._continue


def test_pods_sorted_by_namespace_then_name_and_namespaced_list(sim: KubeEmulator, api: client.CoreV1Api) -> None:
    pods = [make_pod(f"p{i}", ns) for ns in ("zeta", "alpha", "mid") for i in (3, 1, 2)]
    sim.load(pods=pods)
    items, _ = list_all(api.list_pod_for_all_namespaces, 4)
    assert [(p["metadata"]["namespace"], p["metadata"]["name"]) for p in items] == [
        (ns, f"p{i}") for ns in ("alpha", "mid", "zeta") for i in (1, 2, 3)
    ]
    ns_items, metas = list_all(api.list_namespaced_pod, 2, namespace="mid")
    assert names(ns_items) == ["p1", "p2", "p3"] and len(metas) == 2
    assert api.list_namespaced_pod("nothing-here").items == []
    pod = api.read_namespaced_pod("p2", "zeta")
    assert pod.kind == "Pod" and pod.metadata.namespace == "zeta"


def test_continued_pages_are_consistent_with_the_first_page(sim: KubeEmulator, api: client.CoreV1Api) -> None:
    sim.load(pods=[make_pod(f"p{i}", "ns", labels={"v": "old"}) for i in range(10)])
    first = orjson.loads(api.list_namespaced_pod("ns", limit=4, _preload_content=False).data)
    snapshot_rv = first["metadata"]["resourceVersion"]
    sim.delete_pod("ns", "p7")  # later in the list: must still be listed
    sim.add_pod(make_pod("p55", "ns"))  # created after the snapshot: must not be listed
    sim.update_pod("ns", "p8", {"metadata": {"labels": {"v": "new"}}})  # listed in its snapshot version
    sim.delete_pod("ns", "p2")  # already returned: nothing to do
    rest: list[dict[str, Any]] = []
    token = first["metadata"]["continue"]
    while token:
        body = orjson.loads(api.list_namespaced_pod("ns", limit=4, _continue=token, _preload_content=False).data)
        assert body["metadata"]["resourceVersion"] == snapshot_rv
        rest += body["items"]
        token = body["metadata"].get("continue")
    assert names(first["items"]) + names(rest) == [f"p{i}" for i in range(10)]
    p8 = next(p for p in rest if p["metadata"]["name"] == "p8")
    assert p8["metadata"]["labels"] == {"v": "old"}
    # A new list sees the new state.
    now, _ = list_all(api.list_namespaced_pod, 100, namespace="ns")
    assert names(now) == ["p0", "p1", "p3", "p4", "p5", "p55", "p6", "p8", "p9"]


def test_expired_continue_token_answers_410_expired(sim: KubeEmulator, api: client.CoreV1Api) -> None:
    sim.load(nodes=[make_node(f"n{i}") for i in range(5)])
    token = orjson.loads(api.list_node(limit=2, _preload_content=False).data)["metadata"]["continue"]
    sim.compact()
    with pytest.raises(client.ApiException) as exc:
        api.list_node(limit=2, _continue=token)
    assert exc.value.status == 410 and sim.stats()["responses"]["410"] == 1
    assert orjson.loads(exc.value.body) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": EXPIRED_CONTINUE_MESSAGE,
        "reason": "Expired",
        "code": 410,
    }
    # The history window running past the snapshot has the same effect.
    sim.set_history_size(3)
    token = orjson.loads(api.list_node(limit=2, _preload_content=False).data)["metadata"]["continue"]
    for i in range(3):
        sim.cordon(f"n{i}", True)
    assert api.list_node(limit=2, _continue=token).items  # still inside the window
    sim.cordon("n4", True)
    with pytest.raises(client.ApiException) as exc:
        api.list_node(limit=2, _continue=token)
    assert exc.value.status == 410
    with pytest.raises(client.ApiException) as exc:
        api.list_node(limit=2, _continue="not-a-token")
    assert exc.value.status == 400


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("pool=a100", ["a1", "a2"]),
        ("pool==h100", ["h1"]),
        ("pool!=a100", ["cpu", "h1"]),
        ("spot", ["a2"]),
        ("!spot", ["a1", "cpu", "h1"]),
        ("pool in (a100, h100)", ["a1", "a2", "h1"]),
        ("pool notin (a100,h100)", ["cpu"]),
        ("pool in (a100,h100),!spot", ["a1", "h1"]),
        ("nvidia.com/gpu.present=true,pool=h100", ["h1"]),
        ("nvidia.com/gpu.count>4", ["a1", "a2"]),
    ],
)
def test_label_selectors(sim: KubeEmulator, api: client.CoreV1Api, selector: str, expected: list[str]) -> None:
    sim.load(
        nodes=[
            make_node("a1", gpus=8, labels={"pool": "a100"}),
            make_node("a2", gpus=8, labels={"pool": "a100", "spot": "yes"}),
            make_node("h1", gpus=4, labels={"pool": "h100"}),
            make_node("cpu", labels={"pool": "cpu"}),
        ]
    )
    items, _ = list_all(api.list_node, 1, label_selector=selector)
    assert names(items) == expected


def test_field_selectors(sim: KubeEmulator, api: client.CoreV1Api) -> None:
    sim.load(
        nodes=[make_node("n1"), make_node("n2", unschedulable=True)],
        pods=[
            gpu_pod("a", "ns1", "n1"),
            gpu_pod("b", "ns1", "n2"),
            gpu_pod("c", "ns2", "n1", phase="Succeeded"),
            gpu_pod("pending", "ns2", None, phase="Pending"),
        ],
    )

    def pods(selector: str, limit: int = 2) -> list[str]:
        return names(list_all(api.list_pod_for_all_namespaces, limit, field_selector=selector)[0])

    assert pods("spec.nodeName=n1") == ["a", "c"]
    assert pods("spec.nodeName!=n1") == ["b", "pending"]
    assert pods("spec.nodeName=") == ["pending"]
    assert pods("status.phase=Running") == ["a", "b"]
    assert pods("status.phase!=Succeeded,status.phase!=Failed,spec.nodeName=n1") == ["a"]
    assert pods("metadata.name=b") == ["b"]
    assert pods("metadata.namespace=ns2") == ["c", "pending"]
    assert names(api.list_namespaced_pod("ns1", field_selector="spec.nodeName==n2").to_dict()["items"]) == ["b"]
    assert names(api.list_node(field_selector="spec.unschedulable=true").to_dict()["items"]) == ["n2"]
    with pytest.raises(client.ApiException) as exc:
        api.list_pod_for_all_namespaces(field_selector="spec.bogus=1")
    assert exc.value.status == 400 and orjson.loads(exc.value.body)["reason"] == "BadRequest"


def test_get_missing_object_is_404_status(sim: KubeEmulator, api: client.CoreV1Api) -> None:
    with pytest.raises(client.ApiException) as exc:
        api.read_node("nope")
    assert exc.value.status == 404
    body = orjson.loads(exc.value.body)
    assert body["kind"] == "Status" and body["reason"] == "NotFound" and body["message"] == 'nodes "nope" not found'
    with pytest.raises(client.ApiException) as exc:
        api.read_namespaced_pod("nope", "default")
    assert exc.value.status == 404


def test_namespaces_derived_from_pods_and_explicit(sim: KubeEmulator, api: client.CoreV1Api) -> None:
    sim.load(pods=[make_pod("a", "team-b"), make_pod("b", "team-a")], namespaces=["empty"])
    assert [n.metadata.name for n in api.list_namespace().items] == ["empty", "team-a", "team-b"]
    assert api.read_namespace("team-a").status.phase == "Active"
    sim.delete_pod("team-a", "a" if sim.get_pod("team-a", "a") else "b")
    assert [n.metadata.name for n in api.list_namespace().items] == ["empty", "team-b"]
    with pytest.raises(client.ApiException) as exc:
        api.read_namespace("team-a")
    assert exc.value.status == 404


# --------------------------------------------------------------------------- watches


def test_watch_replays_added_modified_deleted_through_kubernetes_watch(
    sim: KubeEmulator, api: client.CoreV1Api
) -> None:
    rv = api.list_node().metadata.resource_version
    sim.add_node(make_node("gpu-1", gpus=8))
    sim.set_node_condition("gpu-1", "Ready", False)
    sim.delete_node("gpu-1")
    w = watch.Watch()
    events = []
    for event in w.stream(
        api.list_node, resource_version=rv, allow_watch_bookmarks=True, timeout_seconds=5, _request_timeout=10
    ):
        if event["type"] == "BOOKMARK":
            continue
        events.append(event)
        if len(events) == 3:
            w.stop()
    assert [e["type"] for e in events] == ["ADDED", "MODIFIED", "DELETED"]
    assert events[0]["object"].metadata.name == "gpu-1"  # deserialized into a V1Node
    ready = {c.type: c.status for c in events[1]["object"].status.conditions}["Ready"]
    assert ready == "False"
    rvs = [int(e["raw_object"]["metadata"]["resourceVersion"]) for e in events]
    assert rvs == sorted(rvs) and rvs[-1] == sim.resource_version


def test_watch_delivers_live_events_and_pods_by_namespace(sim: KubeEmulator, api: client.CoreV1Api) -> None:
    sim.add_node(make_node("n1", gpus=4))
    rv = api.list_pod_for_all_namespaces().metadata.resource_version
    received: list[tuple[str, str]] = []
    w = watch.Watch()

    def consume() -> None:
        for event in w.stream(api.list_namespaced_pod, "team", resource_version=rv, timeout_seconds=5):
            received.append((event["type"], event["object"].metadata.name))
            if len(received) == 3:
                w.stop()

    thread = threading.Thread(target=consume)
    thread.start()
    deadline = time.monotonic() + 10
    while not any(w.started for w in list(sim._watches)):  # the watch is open and waiting: these arrive live
        assert time.monotonic() < deadline, "the watch did not open"
        time.sleep(0.01)
    sim.add_pod(gpu_pod("other", "elsewhere", "n1"))
    sim.add_pod(gpu_pod("job", "team", "n1"))
    sim.set_pod_phase("team", "job", "Succeeded")
    sim.delete_pod("team", "job")
    thread.join(timeout=10)
    assert received == [("ADDED", "job"), ("MODIFIED", "job"), ("DELETED", "job")]


def test_raw_watch_json_lines_and_initial_state(sim: KubeEmulator, api: client.CoreV1Api) -> None:
    sim.add_node(make_node("a"))
    sim.add_node(make_node("b"))
    # rv omitted: synthetic ADDED for the current state, then live events.
    resp = api.list_node(watch=True, timeout_seconds=1, _preload_content=False)
    assert resp.headers.get("Transfer-Encoding") == "chunked"
    sim.cordon("a")
    lines = [orjson.loads(line) for line in watch.watch.iter_resp_lines(resp) if line]
    resp.release_conn()
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in lines] == [
        ("ADDED", "a"),
        ("ADDED", "b"),
        ("MODIFIED", "a"),
    ]
    assert lines[0]["object"]["kind"] == "Node" and lines[0]["object"]["apiVersion"] == "v1"
    assert lines[2]["object"]["spec"]["unschedulable"] is True


def test_watch_bookmarks(sim: KubeEmulator, api: client.CoreV1Api) -> None:
    sim.add_node(make_node("a"))
    rv = str(sim.resource_version)
    resp = api.list_node(
        watch=True, resource_version=rv, allow_watch_bookmarks=True, timeout_seconds=1, _preload_content=False
    )
    events = [orjson.loads(line) for line in watch.watch.iter_resp_lines(resp) if line]
    assert len(events) >= 3  # one per 0.2 s
    assert {e["type"] for e in events} == {"BOOKMARK"}
    assert events[0]["object"] == {"kind": "Node", "apiVersion": "v1", "metadata": {"resourceVersion": rv}}
    # No bookmarks unless asked for.
    resp = api.list_node(watch=True, resource_version=rv, timeout_seconds=0.5, _preload_content=False)
    assert [line for line in watch.watch.iter_resp_lines(resp) if line] == []
    assert sim.stats()["bookmarks_sent"] == len(events)


def test_watch_with_too_old_resource_version_gets_410(sim: KubeEmulator, api: client.CoreV1Api) -> None:
    sim.set_history_size(3)
    start_rv = api.list_node().metadata.resource_version
    for i in range(5):
        sim.add_node(make_node(f"n{i}"))
    # Raw form: one ERROR event with a 410 Expired Status, then the stream ends.
    resp = api.list_node(watch=True, resource_version=start_rv, timeout_seconds=5, _preload_content=False)
    events = [orjson.loads(line) for line in watch.watch.iter_resp_lines(resp) if line]
    assert len(events) == 1 and events[0]["type"] == "ERROR"
    status = events[0]["object"]
    assert status["kind"] == "Status" and status["code"] == 410 and status["reason"] == "Expired"
    assert status["message"].startswith(f"too old resource version: {start_rv} (")
    # The client's Watch raises ApiException(410) when it may not retry.
    with pytest.raises(client.ApiException) as exc:
        list(watch.Watch().stream(api.list_node, resource_version=start_rv, timeout_seconds=5))
    assert exc.value.status == 410
    assert sim.stats()["watch_expired"] == 2
    # A recent rv inside the window still works; compact() forgets everything.
    recent = str(sim.resource_version - 2)
    resp = api.list_node(watch=True, resource_version=recent, timeout_seconds=0.3, _preload_content=False)
    assert [orjson.loads(line)["type"] for line in watch.watch.iter_resp_lines(resp) if line] == ["ADDED", "ADDED"]
    sim.compact()
    with pytest.raises(client.ApiException) as exc:
        list(watch.Watch().stream(api.list_node, resource_version=recent, timeout_seconds=5))
    assert exc.value.status == 410


def test_watch_with_label_selector_sees_objects_enter_and_leave(sim: KubeEmulator, api: client.CoreV1Api) -> None:
    sim.add_node(make_node("n1", labels={"pool": "a"}))
    rv = str(sim.resource_version)
    sim.set_node_labels("n1", {"pool": "b"})  # leaves the selection
    sim.set_node_labels("n1", {"pool": "a", "x": "1"})  # enters again
    sim.add_node(make_node("n2", labels={"pool": "b"}))  # never selected
    resp = api.list_node(
        watch=True, resource_version=rv, label_selector="pool=a", timeout_seconds=0.3, _preload_content=False
    )
    events = [orjson.loads(line) for line in watch.watch.iter_resp_lines(resp) if line]
    assert [e["type"] for e in events] == ["DELETED", "ADDED"]


def test_drop_watches_ends_open_streams(sim: KubeEmulator, api: client.CoreV1Api) -> None:
    sim.add_node(make_node("a"))
    outcome: dict[str, Any] = {}
    opened = threading.Event()

    def consume() -> None:
        started = time.monotonic()
        try:
            for _event in watch.Watch().stream(api.list_node, timeout_seconds=30):
                opened.set()
            outcome["result"] = "ended"
        except Exception as exc:  # an abrupt close may surface as a protocol error
            outcome["result"] = type(exc).__name__
        outcome["seconds"] = time.monotonic() - started

    thread = threading.Thread(target=consume)
    thread.start()
    assert opened.wait(5)
    assert sim.drop_watches() == 1
    thread.join(timeout=5)
    assert not thread.is_alive() and outcome["seconds"] < 5
    assert sim.stats()["watch_streams_active"] == 0


def test_several_watchers_keep_up_with_hundreds_of_events(sim: KubeEmulator, kubeconfig: str) -> None:
    """Four raw JSON-lines watchers and one kubernetes Watch.stream all get every event."""
    sim.load(nodes=[make_node(f"n{i:03d}") for i in range(50)])
    rv = str(sim.resource_version)
    total = 400
    counts = [0] * 5

    def consume(i: int) -> None:
        with config.new_client_from_config(config_file=kubeconfig) as api_client:
            api = client.CoreV1Api(api_client)
            if i == 0:  # the client's own Watch deserializes each event (~1 ms of client CPU)
                w = watch.Watch()
                for _event in w.stream(api.list_node, resource_version=rv, timeout_seconds=10):
                    counts[i] += 1
                    if counts[i] == total:
                        w.stop()
                return
            resp = api.list_node(watch=True, resource_version=rv, timeout_seconds=10, _preload_content=False)
            for line in watch.watch.iter_resp_lines(resp):
                counts[i] += bool(line)
                if counts[i] == total:
                    break
            resp.close()

    threads = [threading.Thread(target=consume, args=(i,)) for i in range(5)]
    for t in threads:
        t.start()
    started = time.monotonic()
    for i in range(total):  # bursts of 50 changes, 20 bursts/s at most
        sim.cordon(f"n{i % 50:03d}", unschedulable=(i // 50) % 2 == 0)
        if i % 50 == 49:
            time.sleep(0.05)
    for t in threads:
        t.join(timeout=15)
    elapsed = time.monotonic() - started
    assert counts == [total] * 5
    assert elapsed < 10
    assert sim.stats()["events_sent"] >= 5 * total


# --------------------------------------------------------------------------- patches


def test_patch_node_strategic_merge_removes_label_and_emits_modified(sim: KubeEmulator, api: client.CoreV1Api) -> None:
    sim.add_node(make_node("gpu-1", gpus=8, labels={"pool": "a100", "team": "x"}))
    rv_before = int(api.read_node("gpu-1").metadata.resource_version)
    resp = api.list_node(watch=True, resource_version=str(rv_before), timeout_seconds=0.5, _preload_content=False)
    patched = api.patch_node(
        "gpu-1", {"metadata": {"labels": {"team": None, "pool": "h100"}}, "spec": {"unschedulable": True}}
    )
    assert patched.metadata.labels["pool"] == "h100" and "team" not in patched.metadata.labels
    assert patched.spec.unschedulable is True
    assert int(patched.metadata.resource_version) == rv_before + 1
    events = [orjson.loads(line) for line in watch.watch.iter_resp_lines(resp) if line]
    assert [e["type"] for e in events] == ["MODIFIED"]
    assert events[0]["object"]["metadata"]["labels"]["pool"] == "h100"
    # Strategic merge merges conditions by type instead of replacing the list.
    api.patch_node_status(
        "gpu-1", {"status": {"conditions": [{"type": "Ready", "status": "False", "reason": "KubeletNotReady"}]}}
    )
    conditions = {c.type: c.status for c in api.read_node("gpu-1").status.conditions}
    assert conditions["Ready"] == "False" and len(conditions) == 5
    # A no-op patch changes nothing, like the real API server.
    rv = sim.resource_version
    api.patch_node("gpu-1", {"spec": {"unschedulable": True}})
    assert sim.resource_version == rv


def test_patch_node_merge_patch_json_patch_and_conflict(sim: KubeEmulator, http: urllib3.PoolManager) -> None:
    sim.add_node(make_node("n1", labels={"a": "1", "b": "2"}))
    url = f"{sim.url}/api/v1/nodes/n1"

    def patch(body: Any, content_type: str) -> urllib3.BaseHTTPResponse:
        return http.request("PATCH", url, body=json.dumps(body), headers={"Content-Type": content_type})

    r = patch({"metadata": {"labels": {"a": None, "c": "3"}}}, "application/merge-patch+json")
    assert r.status == 200
    assert orjson.loads(r.data)["metadata"]["labels"] == {**sim.get_node("n1")["metadata"]["labels"]}
    labels = sim.get_node("n1")["metadata"]["labels"]
    assert "a" not in labels and labels["b"] == "2" and labels["c"] == "3"
    r = patch(
        [{"op": "add", "path": "/metadata/labels/d", "value": "4"}, {"op": "remove", "path": "/metadata/labels/b"}],
        "application/json-patch+json",
    )
    assert r.status == 200
    labels = sim.get_node("n1")["metadata"]["labels"]
    assert labels["d"] == "4" and "b" not in labels
    r = patch({"metadata": {"resourceVersion": "1", "labels": {"e": "5"}}}, "application/merge-patch+json")
    assert r.status == 409 and orjson.loads(r.data)["reason"] == "Conflict"
    r = patch({"metadata": {"labels": {"e": "5"}}}, "text/plain")
    assert r.status == 415
    r = patch({"metadata": {"labels": {"e": "5"}}}, "application/merge-patch+json")
    assert r.status == 200
    assert (
        http.request(
            "PATCH",
            f"{sim.url}/api/v1/nodes/missing",
            body=b"{}",
            headers={"Content-Type": "application/merge-patch+json"},
        ).status
        == 404
    )


# --------------------------------------------------------------------------- faults


def test_fail_next_429_with_retry_after_then_5xx(sim: KubeEmulator, api: client.CoreV1Api, kubeconfig: str) -> None:
    sim.add_node(make_node("n1"))
    cfg = client.Configuration()
    config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)
    cfg.retries = False  # else urllib3 honours Retry-After and retries the 429 by itself
    with client.ApiClient(cfg) as api_client:
        strict = client.CoreV1Api(api_client)
        sim.fail_next(1, status=429, retry_after=3)
        with pytest.raises(client.ApiException) as exc:
            strict.list_node()
        assert exc.value.status == 429
        assert exc.value.headers["Retry-After"] == "3"
        body = orjson.loads(exc.value.body)
        assert body["kind"] == "Status" and body["reason"] == "TooManyRequests"
        assert body["details"]["retryAfterSeconds"] == 3
        assert len(strict.list_node().items) == 1  # only the next request failed

    # The default client sleeps Retry-After and retries transparently.
    sim.fail_next(1, status=429, retry_after=1)
    started = time.monotonic()
    assert len(api.list_node().items) == 1
    assert time.monotonic() - started >= 0.9

    sim.fail_next(2, status=503, path_prefix="/api/v1/pods")
    assert len(api.list_node().items) == 1  # other paths unaffected
    for _ in range(2):
        with pytest.raises(client.ApiException) as exc:
            api.list_pod_for_all_namespaces()
        assert exc.value.status == 503 and orjson.loads(exc.value.body)["reason"] == "ServiceUnavailable"
    api.list_pod_for_all_namespaces()

    sim.fail_next(1, status=500)
    with pytest.raises(client.ApiException) as exc:
        api.read_node("n1")
    assert exc.value.status == 500 and orjson.loads(exc.value.body)["reason"] == "InternalError"
    assert sim.stats()["faults_injected"] == 5


def test_offline_refuses_connections_then_comes_back(sim: KubeEmulator, api: client.CoreV1Api) -> None:
    sim.add_node(make_node("n1"))
    url = sim.url
    assert api.list_node().items
    sim.set_offline(True)
    with pytest.raises(urllib3.exceptions.HTTPError):
        api.list_node(_request_timeout=2)
    sim.set_offline(False)
    assert sim.url == url
    assert [n.metadata.name for n in api.list_node().items] == ["n1"]


def test_offline_reset_over_http_control(sim: KubeEmulator, api: client.CoreV1Api, http: urllib3.PoolManager) -> None:
    sim.add_node(make_node("n1"))
    assert control(http, sim, "set_offline", offline=True).status == 200
    with pytest.raises(urllib3.exceptions.HTTPError):
        api.list_node(_request_timeout=2)
    assert control(http, sim, "set_offline", offline=True, mode="refuse").status == 400  # could never come back
    assert control(http, sim, "set_offline", offline=False).status == 200
    assert len(api.list_node().items) == 1
    # With a duration it comes back by itself.
    sim.set_offline(True, mode="refuse", duration=0.3)
    with pytest.raises(urllib3.exceptions.HTTPError):
        api.list_node(_request_timeout=2)
    deadline = time.monotonic() + 10
    while True:  # back by itself: the first request that is answered, not a fixed wait
        try:
            assert len(api.list_node(_request_timeout=2).items) == 1
            break
        except urllib3.exceptions.HTTPError:
            assert time.monotonic() < deadline, "the emulator did not come back online by itself"
            time.sleep(0.05)


# --------------------------------------------------------------------------- control surface


def test_http_control_surface(sim: KubeEmulator, api: client.CoreV1Api, http: urllib3.PoolManager) -> None:
    r = control(http, sim, "add_node", make={"name": "gpu-1", "gpus": 4, "gpu_product": "NVIDIA-H100-80GB-HBM3"})
    assert r.status == 200 and orjson.loads(r.data)["ok"] is True
    assert api.read_node("gpu-1").metadata.labels["nvidia.com/gpu.family"] == "hopper"
    assert control(http, sim, "add_node", make={"name": "gpu-1"}).status == 409
    control(http, sim, "add_pod", obj=gpu_pod("job", "ml", "gpu-1", gpus=2))
    control(http, sim, "update_node", name="gpu-1", patch={"metadata": {"labels": {"pool": "h100"}}})
    control(http, sim, "cordon", name="gpu-1", unschedulable=True)
    control(http, sim, "set_node_condition", name="gpu-1", type="MemoryPressure", status="True")
    control(http, sim, "set_pod_phase", namespace="ml", name="job", phase="Failed")
    node = api.read_node("gpu-1")
    assert node.metadata.labels["pool"] == "h100" and node.spec.unschedulable
    assert {t.key for t in node.spec.taints} == {
        "node.kubernetes.io/unschedulable",
        "node.kubernetes.io/memory-pressure",
    }
    assert api.read_namespaced_pod("job", "ml").status.phase == "Failed"
    control(http, sim, "fail_next", n=1, status=500)
    with pytest.raises(client.ApiException):
        api.list_node()
    r = control(http, sim, "load", nodes=[make_node("n2")], pods=[make_pod("p", "ml")])
    assert orjson.loads(r.data)["result"] == sim.resource_version
    control(http, sim, "delete_pod", namespace="ml", name="p")
    r = http.request("GET", f"{sim.url}/_emulator/stats")
    stats = orjson.loads(r.data)
    assert stats["nodes"] == 2 and stats["pods"] == 1 and stats["faults_injected"] == 1
    assert stats["requests"]["get nodes"] >= 1 and stats["requests"]["fault 500"] == 1
    assert control(http, sim, "no_such_op").status == 404
    assert control(http, sim, "cordon", bogus=1).status == 400
    assert control(http, sim, "delete_node", name="missing").status == 404
    r = control(http, sim, "compact")
    assert orjson.loads(r.data)["result"] == sim.resource_version


def test_python_api_updates_and_errors(sim: KubeEmulator) -> None:
    sim.add_node(make_node("n1"))
    with pytest.raises(ApiError) as exc:
        sim.add_node(make_node("n1"))
    assert exc.value.code == 409 and exc.value.reason == "AlreadyExists"
    uid = sim.get_node("n1")["metadata"]["uid"]
    sim.upsert_node(make_node("n1", gpus=2))
    assert sim.get_node("n1")["metadata"]["uid"] == uid  # an upsert keeps the identity
    sim.update_node("n1", lambda n: n["metadata"]["labels"].update(pool="x"))
    assert sim.get_node("n1")["metadata"]["labels"]["pool"] == "x"
    with pytest.raises(ApiError) as exc:
        sim.update_node("n1", lambda n: {**n, "metadata": {**n["metadata"], "name": "other"}})
    assert exc.value.code == 422
    with pytest.raises(ApiError) as exc:
        sim.delete_pod("default", "missing")
    assert exc.value.code == 404
    sim.set_node_condition("n1", "Ready", "Unknown")
    taints = {t["key"] for t in sim.get_node("n1")["spec"]["taints"]}
    assert taints == {"node.kubernetes.io/unreachable"}
    sim.set_node_condition("n1", "Ready", True)
    assert "taints" not in sim.get_node("n1")["spec"]


def test_chaos_keeps_changing_the_cluster(sim: KubeEmulator) -> None:
    nodes, pods = generate_cluster(12, 30, seed=3)
    sim.load(nodes=nodes, pods=pods)
    rv = sim.resource_version
    sim.start_chaos(0.02, seed=7)
    deadline = time.monotonic() + 10
    while sim.resource_version <= rv + 5 and time.monotonic() < deadline:  # until it has changed things
        time.sleep(0.02)
    sim.stop_chaos()
    assert sim.resource_version > rv + 5
    described = {sim.chaos_step(random.Random(i)).split()[0] for i in range(30)}
    assert described <= {"node", "pod"}


def test_load_without_events_compacts_and_drops_watches(sim: KubeEmulator, api: client.CoreV1Api) -> None:
    sim.add_node(make_node("old"))
    rv = api.list_node().metadata.resource_version
    new_rv = sim.load(nodes=[make_node(f"n{i}") for i in range(3)], emit_events=False)
    assert new_rv == sim.resource_version
    assert {
        n["metadata"]["resourceVersion"] for n in list_all(api.list_node, 10)[0] if n["metadata"]["name"] != "old"
    } == {str(new_rv)}
    with pytest.raises(client.ApiException) as exc:
        list(watch.Watch().stream(api.list_node, resource_version=rv, timeout_seconds=2))
    assert exc.value.status == 410


def test_create_and_delete_through_the_api(sim: KubeEmulator, api: client.CoreV1Api) -> None:
    created = api.create_namespaced_pod("ml", gpu_pod("job", "ml", None, phase="Pending"))
    assert created.metadata.uid and created.metadata.namespace == "ml"
    with pytest.raises(client.ApiException) as exc:
        api.create_namespaced_pod("ml", gpu_pod("job", "ml", None))
    assert exc.value.status == 409 and orjson.loads(exc.value.body)["reason"] == "AlreadyExists"
    api.create_node(make_node("n1"))
    rv = str(sim.resource_version)
    api.delete_namespaced_pod("job", "ml")
    api.delete_node("n1")
    resp = api.list_pod_for_all_namespaces(watch=True, resource_version=rv, timeout_seconds=0.2, _preload_content=False)
    events = [orjson.loads(line) for line in watch.watch.iter_resp_lines(resp) if line]
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("DELETED", "job")]
    assert api.list_node().items == [] and sim.get_pod("ml", "job") is None


# --------------------------------------------------------------------------- scale


def test_scale_list_50k_pods_in_pages_of_500(sim: KubeEmulator, api: client.CoreV1Api) -> None:
    # CPU seconds of this process (the emulator's threads and the client alike): the shared 2-core
    # machine's load makes wall-clock time measure the neighbours, not the emulator.
    started = time.process_time()
    nodes, pod_iter = iter_cluster(5000, 50_000, seed=1)
    sim.load(nodes=nodes, pods=pod_iter)
    del nodes, pod_iter
    load_seconds = time.process_time() - started
    started = time.process_time()
    keys: set[tuple[str, str]] = set()  # keep keys only, like a sync that stores what it needs
    token, pages = None, 0
    while True:
        body = orjson.loads(api.list_pod_for_all_namespaces(limit=500, _continue=token, _preload_content=False).data)
        keys.update((p["metadata"]["namespace"], p["metadata"]["name"]) for p in body["items"])
        pages += 1
        token = body["metadata"].get("continue")
        if not token:
            break
    list_seconds = time.process_time() - started
    assert len(keys) == 50_000 and pages == 100
    node_items, _ = list_all(api.list_node, 500)
    assert len(node_items) == 5000
    print(f"\ngenerate+load {load_seconds:.2f}s, list 50k pods in 100 pages {list_seconds:.2f}s")
    assert load_seconds < 30 and list_seconds < 15


# --------------------------------------------------------------------------- pure helpers


def test_generated_cluster_is_deterministic_and_lazy_variant_matches() -> None:
    nodes, pods = generate_cluster(12, 40, seed=5)
    lazy_nodes, lazy_pods = iter_cluster(12, 40, seed=5)
    assert nodes == lazy_nodes and pods == list(lazy_pods)
    assert len({n["metadata"]["name"] for n in nodes}) == 12 and len(pods) == 40
    for node in nodes:  # GPUs are never over-committed
        gpus = int(node["status"]["capacity"].get("nvidia.com/gpu", "0"))
        used = sum(
            int(c["resources"].get("requests", {}).get("nvidia.com/gpu", 0))
            for p in pods
            if p["spec"].get("nodeName") == node["metadata"]["name"]
            for c in p["spec"]["containers"]
        )
        assert used <= gpus


def test_make_node_is_realistic() -> None:
    node = make_node(
        "gpu-7",
        gpus=8,
        gpu_product="NVIDIA-H100-80GB-HBM3",
        zone="us-east-1b",
        instance_type="p5.48xlarge",
        capacity_type="spot",
        conditions={"DiskPressure": True},
        created="2025-01-01T00:00:00Z",
    )
    labels = node["metadata"]["labels"]
    assert labels["nvidia.com/gpu.present"] == "true" and labels["nvidia.com/gpu.count"] == "8"
    assert labels["nvidia.com/gpu.memory"] == "81559" and labels["nvidia.com/gpu.family"] == "hopper"
    assert labels["kubernetes.io/hostname"] == "gpu-7" and labels["topology.kubernetes.io/zone"] == "us-east-1b"
    assert (
        labels["node.kubernetes.io/instance-type"] == "p5.48xlarge" and labels["karpenter.sh/capacity-type"] == "spot"
    )
    assert node["status"]["capacity"]["nvidia.com/gpu"] == "8" == node["status"]["allocatable"]["nvidia.com/gpu"]
    conditions = {c["type"]: c for c in node["status"]["conditions"]}
    assert set(conditions) == {"Ready", "MemoryPressure", "DiskPressure", "PIDPressure", "NetworkUnavailable"}
    assert conditions["Ready"]["status"] == "True" and conditions["DiskPressure"]["status"] == "True"
    assert conditions["Ready"]["lastTransitionTime"] == "2025-01-01T00:00:00Z"
    assert node["spec"]["taints"] == [{"key": "node.kubernetes.io/disk-pressure", "effect": "NoSchedule"}]
    cpu_node = make_node("cpu-1")
    assert (
        "nvidia.com/gpu" not in cpu_node["status"]["capacity"]
        and "nvidia.com/gpu.present" not in cpu_node["metadata"]["labels"]
    )
    client.ApiClient()._ApiClient__deserialize(make_node("x", gpus=1), "V1Node")  # the client's model accepts it


def test_make_pod_is_realistic() -> None:
    pod = make_pod(
        "train",
        "ml",
        node="gpu-1",
        containers=[{"name": "main", "requests": {"cpu": "4", "nvidia.com/gpu": 2}}],
        init_containers=[{"name": "init", "requests": {"cpu": "1"}}],
        overhead={"cpu": "250m"},
        priority=1000,
        priority_class="high",
        labels={"app": "train"},
    )
    spec, status = pod["spec"], pod["status"]
    assert spec["nodeName"] == "gpu-1" and spec["priority"] == 1000 and spec["priorityClassName"] == "high"
    assert spec["overhead"] == {"cpu": "250m"}
    assert spec["containers"][0]["resources"] == {
        "limits": {"nvidia.com/gpu": "2"},
        "requests": {"cpu": "4", "nvidia.com/gpu": "2"},
    }
    assert spec["initContainers"][0]["name"] == "init"
    assert status["phase"] == "Running" and status["qosClass"] == "Burstable"
    assert {c["type"]: c["status"] for c in status["conditions"]}["Ready"] == "True"
    assert status["containerStatuses"][0]["ready"] is True and "running" in status["containerStatuses"][0]["state"]
    pending = make_pod("wait", "ml", phase="Pending")
    assert "nodeName" not in pending["spec"] and pending["status"]["conditions"][0]["reason"] == "Unschedulable"
    said = make_pod("said", "ml", phase="Pending", scheduling_message="0/3 nodes are available: 3 Insufficient cpu.")
    assert said["status"]["conditions"][0] == {
        "type": "PodScheduled", "status": "False", "lastProbeTime": None,
        "lastTransitionTime": said["status"]["conditions"][0]["lastTransitionTime"], "reason": "Unschedulable",
        "message": "0/3 nodes are available: 3 Insufficient cpu."}
    done = make_pod("done", "ml", node="n", phase="Succeeded")
    assert done["status"]["containerStatuses"][0]["state"]["terminated"]["reason"] == "Completed"
    client.ApiClient()._ApiClient__deserialize(pod, "V1Pod")


@pytest.mark.parametrize(
    ("selector", "labels", "expected"),
    [
        ("a=1", {"a": "1"}, True),
        ("a!=1", {}, True),
        ("a notin (1,2)", {}, True),
        ("a in (1,2)", {}, False),
        ("a,b", {"a": "", "b": "x"}, True),
        ("!a", {"a": "x"}, False),
        ("x.io/a == 1 , b in (y)", {"x.io/a": "1", "b": "y"}, True),
        ("n<3", {"n": "2"}, True),
    ],
)
def test_label_selector_parser(selector: str, labels: dict[str, str], expected: bool) -> None:
    match = parse_label_selector(selector)
    assert match is not None and match(labels) is expected


@pytest.mark.parametrize("bad", ["a in (1", "a===b", "=x", "a in 1", "a b"])
def test_label_selector_parser_rejects_garbage(bad: str) -> None:
    with pytest.raises(SelectorError):
        parse_label_selector(bad)


def test_field_selector_parser() -> None:
    match = parse_field_selector("pods", "spec.nodeName=n1,status.phase!=Failed")
    assert match is not None
    with pytest.raises(SelectorError):
        parse_field_selector("nodes", "spec.nodeName=x")
    assert parse_label_selector("") is None and parse_field_selector("pods", " ") is None


def test_patch_helpers() -> None:
    doc = {
        "a": {"b": 1, "c": [1, 2]},
        "conditions": [{"type": "Ready", "status": "True"}, {"type": "X", "status": "1"}],
    }
    assert json_merge_patch(doc, {"a": {"b": None, "c": [3]}}) == {"a": {"c": [3]}, "conditions": doc["conditions"]}
    merged = strategic_merge_patch(
        doc, {"conditions": [{"type": "Ready", "status": "False"}, {"type": "X", "$patch": "delete"}]}
    )
    assert merged["conditions"] == [{"type": "Ready", "status": "False"}]
    assert strategic_merge_patch({"finalizers": ["a"]}, {"finalizers": ["b", "a"]}) == {"finalizers": ["a", "b"]}
    assert strategic_merge_patch({"m": {"x": 1, "y": 2}}, {"m": {"$patch": "replace", "z": 3}}) == {"m": {"z": 3}}
    patched = json_patch(
        doc,
        [
            {"op": "replace", "path": "/a/b", "value": 2},
            {"op": "add", "path": "/a/c/-", "value": 9},
            {"op": "move", "from": "/a/b", "path": "/b"},
            {"op": "test", "path": "/b", "value": 2},
        ],
    )
    assert patched["b"] == 2 and patched["a"]["c"] == [1, 2, 9] and doc["a"]["b"] == 1
    with pytest.raises(ApiError):
        json_patch(doc, [{"op": "test", "path": "/a/b", "value": 5}])


# --------------------------------------------------------------------------- CLI


def test_cli_serves_until_sigterm(tmp_path: Path) -> None:
    scenario = tmp_path / "scenario.json"
    scenario.write_text(json.dumps({"nodes": [make_node("gpu-1", gpus=8)], "pods": [gpu_pod("job", "ml", "gpu-1")]}))
    kubeconfig = tmp_path / "kc"
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "kubesim",
            "--port",
            "0",
            "--kubeconfig",
            str(kubeconfig),
            "--scenario",
            str(scenario),
            "--chaos",
            "0.05",
            "--seed",
            "1",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=env,
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert "listening on http://127.0.0.1:" in first, (
            first + proc.stderr.read() if proc.poll() is not None else first
        )
        assert str(kubeconfig) in proc.stdout.readline()
        with config.new_client_from_config(config_file=str(kubeconfig)) as api_client:
            api = client.CoreV1Api(api_client)
            assert api.read_node("gpu-1").status.capacity["nvidia.com/gpu"] == "8"
            rv = int(api.list_pod_for_all_namespaces().metadata.resource_version)
            deadline = time.monotonic() + 10
            while int(api.list_pod_for_all_namespaces().metadata.resource_version) <= rv:  # until chaos changes things
                assert time.monotonic() < deadline, "chaos changed nothing"
                time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_chaos_places_gpu_pods_only_where_gpus_are_free():
    # An over-full node would show more GPUs allocated than it has in the demo console.
    sim = KubeEmulator()
    sim.add_node(make_node("gpu-1", gpus=4))
    sim.add_pod(make_pod("busy", "team", node="gpu-1", containers=[{"name": "m", "requests": {"nvidia.com/gpu": "4"}}]))
    rng = random.Random(3)
    for _ in range(60):
        sim.chaos_step(rng)
    with sim._lock:
        assert sim._gpus_in_use("gpu-1") <= 4


# --------------------------------------------------------------------------- request and object size limits


def test_a_body_over_3_mib_is_413_and_an_object_over_1_5_mib_is_refused_as_a_real_cluster_does(
        sim: KubeEmulator, http: urllib3.PoolManager) -> None:
    """kube-apiserver reads at most MaxRequestBodyBytes (3 MiB) of a body: "Request entity too large: limit is
    3145728" (413, RequestEntityTooLarge); etcd refuses a request over 1.5 MiB, which the API server passes
    on as a 500 Status "etcdserver: request is too large". Nothing is stored either way."""
    sim.add_namespace("ns")
    url = f"{sim.url}/api/v1/namespaces/ns/pods"
    rv = sim._rv

    def pod(size: int) -> bytes:
        return json.dumps(make_pod("big", "ns", annotations={"x": "y" * size})).encode()

    response = http.request("POST", url, body=pod(3 * 1024 * 1024), headers={"Content-Type": "application/json"})
    assert response.status == 413
    assert orjson.loads(response.data) == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": "Request entity too large: limit is 3145728", "reason": "RequestEntityTooLarge", "code": 413}
    response = http.request("POST", url, body=pod(3 * 1024 * 1024 // 2), headers={"Content-Type": "application/json"})
    assert response.status == 500
    assert orjson.loads(response.data)["message"] == "etcdserver: request is too large"
    assert sim.list("pods", "ns") == [] and sim._rv == rv
    # Just under the limit is stored; so is an update that stays under it, and one that grows past it is refused.
    response = http.request("POST", url, body=pod(1024 * 1024), headers={"Content-Type": "application/json"})
    assert response.status == 201
    patch = json.dumps({"metadata": {"annotations": {"z": "w" * (1024 * 1024)}}}).encode()
    response = http.request("PATCH", f"{url}/big", body=patch, headers={"Content-Type": "application/merge-patch+json"})
    assert response.status == 500 and b"etcdserver: request is too large" in response.data
    assert "z" not in sim.get("pods", "big", "ns")["metadata"]["annotations"]
    # The server still answers.
    assert http.request("GET", f"{url}/big").status == 200
