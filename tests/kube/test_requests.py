"""kube.requests against upstream's own cases, transcribed: k8s.io/component-helpers/resource/helpers_test.go
(TestPodRequestsAndLimits, TestPodRequestsAndLimitsWithoutOverhead, TestPodResourceRequests,
TestPodResourceLimits' restartable init container cases, TestPodLevelResourceRequests).

Upstream's pods there are not defaulted; the API server defaults a missing request to the limit, which
`pod_requests` applies, so upstream's limit-only sidecar tables read here as requests (said at each case).
"""
from __future__ import annotations

from decimal import Decimal

import pytest

from kube.quantity import QuantityError, parse_quantity
from kube.requests import container_requests, pod_is_active, pod_is_bound, pod_requests


def amounts(**quantities: str) -> dict[str, Decimal]:
    return {k.replace("_", "."): parse_quantity(v) for k, v in quantities.items()}


def c(name: str = "", requests: dict | None = None, limits: dict | None = None, always: bool = False) -> dict:
    container: dict = {"resources": {}}
    if name:
        container["name"] = name
    if requests is not None:
        container["resources"]["requests"] = requests
    if limits is not None:
        container["resources"]["limits"] = limits
    if always:
        container["restartPolicy"] = "Always"
    return container


def pod(containers=(), init=(), overhead=None, pod_level=None) -> dict:
    spec: dict = {"containers": list(containers), "initContainers": list(init)}
    if overhead is not None:
        spec["overhead"] = overhead
    if pod_level is not None:
        spec["resources"] = pod_level
    return {"spec": spec}


CASES = [
    # TestPodRequestsAndLimits (getPod: one container, its requests and limits, and the pod's overhead)
    ("just-limit-no-overhead (the limit becomes the request)", pod([c(limits={"cpu": "9"})]), amounts(cpu="9")),
    ("just-overhead", pod([c()], overhead={"cpu": "5", "memory": "5"}), amounts(cpu="5", memory="5")),
    ("req-and-overhead", pod([c(requests={"cpu": "1", "memory": "10"})], overhead={"cpu": "5", "memory": "5"}),
     amounts(cpu="6", memory="15")),
    ("all-req-lim-and-overhead",
     pod([c(requests={"cpu": "1", "memory": "10"}, limits={"cpu": "2", "memory": "12"})],
         overhead={"cpu": "5", "memory": "5"}), amounts(cpu="6", memory="15")),
    ("req-some-lim-and-overhead",
     pod([c(requests={"cpu": "1", "memory": "10"}, limits={"cpu": "2"})], overhead={"cpu": "5", "memory": "5"}),
     amounts(cpu="6", memory="15")),
    # TestPodRequestsAndLimitsWithoutOverhead (here overhead always counts: the scheduler's view)
    ("two container no overhead - should just be sum of containers",
     pod([c("foobar", {"cpu": "1", "memory": "5"}, {"cpu": "2", "memory": "10"}),
          c("foobar2", {"cpu": "4", "memory": "12"}, {"cpu": "8", "memory": "24"})]), amounts(cpu="5", memory="17")),
    ("two container with overhead, massive init - the largest init, plus overhead",
     pod([c("foobar", {"cpu": "1", "memory": "5"}, {"cpu": "2", "memory": "10"}),
          c("foobar2", {"cpu": "4", "memory": "12"}, {"cpu": "8", "memory": "24"})],
         [c("small-init", {"cpu": "1", "memory": "5"}, {"cpu": "1", "memory": "5"}),
          c("big-init", {"cpu": "40", "memory": "120"}, {"cpu": "80", "memory": "240"})],
         overhead={"cpu": "3", "memory": "8"}), amounts(cpu="43", memory="128")),
    # TestPodResourceRequests (nil options)
    ("nil options, larger init container", pod([c(requests={"cpu": "1"})], [c(requests={"cpu": "4"})]), amounts(cpu="4")),
    ("nil options, larger containers",
     pod([c(requests={"cpu": "2"}), c(requests={"cpu": "3"})], [c(requests={"cpu": "2"})]), amounts(cpu="5")),
    ("pod overhead included",
     pod([c(requests={"cpu": "2"}), c(requests={"cpu": "3"})], [c(requests={"cpu": "2"}, limits={"cpu": "2"})],
         overhead={"cpu": "1", "memory": "1Gi"}), amounts(cpu="6", memory="1Gi")),
    # TestPodResourceLimits, restartable init containers (limits only: defaulted to requests)
    ("restartable init container: sidecar + regular container",
     pod([c("container-1", limits={"cpu": "1"})], [c("restartable-init-1", limits={"cpu": "1"}, always=True)]),
     amounts(cpu="2")),
    ("multiple restartable init containers: max(5, sidecars 3+2+1 + regular 1) = 7",
     pod([c("container-1", limits={"cpu": "1"})],
         [c("init-1", limits={"cpu": "5"}), c("restartable-init-1", limits={"cpu": "1"}, always=True),
          c("restartable-init-2", limits={"cpu": "2"}, always=True),
          c("restartable-init-3", limits={"cpu": "3"}, always=True)]), amounts(cpu="7")),
    ("multiple restartable and regular init containers: init-2 5 + the sidecars started before it 1+2 = 8",
     pod([c("container-1", limits={"cpu": "1"})],
         [c("init-1", limits={"cpu": "5"}), c("restartable-init-1", limits={"cpu": "1"}, always=True),
          c("restartable-init-2", limits={"cpu": "2"}, always=True), c("init-2", limits={"cpu": "5"}),
          c("restartable-init-3", limits={"cpu": "3"}, always=True)]), amounts(cpu="8")),
    ("restartable-init, init and regular: 10 + 200 = 210",
     pod([c("container-1", limits={"cpu": "100"})],
         [c("restartable-init-1", limits={"cpu": "10"}, always=True), c("init-1", limits={"cpu": "200"})]),
     amounts(cpu="210")),
    # TestPodLevelResourceRequests
    ("nil", pod(), {}),
    ("pod level memory resource", pod(pod_level={"requests": {"memory": "2Mi"}}), amounts(memory="2Mi")),
    ("pod level memory and container level cpu",
     pod([c(requests={"cpu": "2m"})], pod_level={"requests": {"memory": "2Mi"}}), amounts(memory="2Mi", cpu="2m")),
    ("pod level unsupported resources set at both pod-level and container-level",
     pod([c(requests={"storage": "3Mi"})], pod_level={"requests": {"storage": "2Mi"}}), amounts(storage="3Mi")),
]


@pytest.mark.parametrize(("name", "the_pod", "expected"), CASES, ids=[case[0] for case in CASES])
def test_pod_requests_as_upstream(name: str, the_pod: dict, expected: dict) -> None:
    assert pod_requests(the_pod) == expected


def test_gpus_given_only_as_a_limit_count_and_every_resource_is_kept() -> None:
    asks = pod_requests(pod([c("train", {"cpu": "500m", "memory": "1Gi"}, {"nvidia.com/gpu": "2", "example.com/fpga": "1"})]))
    assert asks == {"cpu": Decimal("0.5"), "memory": 2**30, "nvidia.com/gpu": 2, "example.com/fpga": 1}
    # Asked for by name: exactly those, 0 for what the pod does not ask.
    asks = pod_requests(pod([c("train", {"cpu": "500m"})]), ("nvidia.com/gpu", "cpu", "memory"))
    assert asks == {"nvidia.com/gpu": 0, "cpu": Decimal("0.5"), "memory": 0}


def test_a_bad_quantity_is_reported_naming_the_container_and_the_resource() -> None:
    with pytest.raises(QuantityError) as refused:
        pod_requests(pod([c("ok", {"cpu": "1"})], [c("setup", limits={"nvidia.com/gpu": "two"})]))
    message = str(refused.value)
    assert message.startswith('spec.initContainers[0] ("setup").resources.limits[nvidia.com/gpu]: ')
    assert "quantities must match the regular expression" in message and "'two'" in message
    with pytest.raises(QuantityError, match=r"spec\.overhead\[cpu\]"):
        pod_requests(pod([c()], overhead={"cpu": "lots"}))
    with pytest.raises(QuantityError, match=r"spec\.containers\[0\]: must be a container"):
        pod_requests({"spec": {"containers": ["nginx"]}})
    with pytest.raises(QuantityError, match=r"must be a map of resource name to quantity"):
        container_requests({"resources": {"requests": ["cpu", "1"]}})


def test_active_and_bound() -> None:
    assert pod_is_active({"status": {"phase": "Pending"}}) and pod_is_active({})
    assert not pod_is_active({"status": {"phase": "Succeeded"}}) and not pod_is_active({"status": {"phase": "Failed"}})
    assert pod_is_bound({"spec": {"nodeName": "gpu-1"}}) and not pod_is_bound({"spec": {}})
