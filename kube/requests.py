"""A pod's effective requests, as upstream computes them (k8s.io/component-helpers/resource `PodRequests`,
KEP-753 for sidecars):

    max( Σ app containers + Σ restartable init containers (sidecars, `restartPolicy: Always`),
         each regular init container + the sidecars started before it )
    with pod-level `spec.resources.requests` (cpu, memory, hugepages-*) replacing the containers' figure,
    + `spec.overhead`

per resource name. A container's resource given only as a limit counts the limit (the API server defaults a
missing request to the limit), so a pod read before the API server defaulted it, or rendered by the console,
counts what the cluster will count. Amounts are Decimals in the resource's unit: CPU in cores, memory and
storage in bytes, `nvidia.com/gpu` in devices.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any

from kube.quantity import QuantityError, parse_quantity

__all__ = [
    "CPU", "EPHEMERAL_STORAGE", "GPU", "MEMORY", "container_requests", "pod_is_active", "pod_is_bound",
    "pod_requests", "resource_list",
]

CPU = "cpu"
MEMORY = "memory"
GPU = "nvidia.com/gpu"
EPHEMERAL_STORAGE = "ephemeral-storage"
_POD_LEVEL = (CPU, MEMORY)
_HUGEPAGES = "hugepages-"


def resource_list(resources: Any, where: str = "") -> dict[str, Decimal]:
    """A ResourceList (`{name: quantity}`) as amounts. Raises QuantityError naming `where` and the resource."""
    if resources is None:
        return {}
    if not isinstance(resources, Mapping):
        raise QuantityError(f"{where}: must be a map of resource name to quantity, got {resources!r}")
    out = {}
    for name, quantity in resources.items():
        try:
            out[str(name)] = parse_quantity(quantity)
        except QuantityError as exc:
            raise QuantityError(f"{where}[{name}]: {exc}") from exc
    return out


def container_requests(container: Any, where: str = "container") -> dict[str, Decimal]:
    """A container's requests, a limit standing in for a missing request."""
    if not isinstance(container, Mapping):
        raise QuantityError(f"{where}: must be a container (a mapping), got {container!r}")
    resources = container.get("resources") or {}
    if not isinstance(resources, Mapping):
        raise QuantityError(f"{where}.resources: must be a mapping of requests and limits, got {resources!r}")
    requests = resource_list(resources.get("requests"), f"{where}.resources.requests")
    for name, amount in resource_list(resources.get("limits"), f"{where}.resources.limits").items():
        requests.setdefault(name, amount)
    return requests


def _add(into: dict[str, Decimal], other: Mapping[str, Decimal]) -> None:
    for name, amount in other.items():
        into[name] = into.get(name, Decimal(0)) + amount


def _max(into: dict[str, Decimal], other: Mapping[str, Decimal]) -> None:
    for name, amount in other.items():
        if name not in into or amount > into[name]:
            into[name] = amount


def _containers(spec: Mapping[str, Any], field: str) -> list[tuple[str, Any]]:
    containers = spec.get(field) or []
    if not isinstance(containers, list):
        raise QuantityError(f"spec.{field}: must be a list of containers, got {containers!r}")
    out = []
    for index, container in enumerate(containers):
        name = container.get("name") if isinstance(container, Mapping) else None
        out.append((f'spec.{field}[{index}]' + (f' ("{name}")' if name else ""), container))
    return out


def pod_requests(pod: Mapping[str, Any], names: Iterable[str] | None = None) -> dict[str, Decimal]:
    """Per resource name, what the pod asks the scheduler for (see the module); with `names`, exactly those
    (0 for what it does not ask). Raises QuantityError naming the container and the resource when a
    quantity is not one."""
    spec = pod.get("spec") or {}
    if not isinstance(spec, Mapping):
        raise QuantityError(f"spec: must be a mapping, got {spec!r}")
    total: dict[str, Decimal] = {}
    for where, container in _containers(spec, "containers"):
        _add(total, container_requests(container, where))
    sidecars: dict[str, Decimal] = {}
    init_peak: dict[str, Decimal] = {}
    for where, container in _containers(spec, "initContainers"):
        requests = container_requests(container, where)
        if container.get("restartPolicy") == "Always":
            # A sidecar keeps running beside the app containers and every init container after it.
            _add(total, requests)
            _add(sidecars, requests)
            _max(init_peak, sidecars)
        else:
            running = dict(requests)
            _add(running, sidecars)
            _max(init_peak, running)
    _max(total, init_peak)
    pod_level = (spec.get("resources") or {}) if isinstance(spec.get("resources"), Mapping) else {}
    for name, amount in resource_list(pod_level.get("requests"), "spec.resources.requests").items():
        if name in _POD_LEVEL or name.startswith(_HUGEPAGES):
            total[name] = amount
    _add(total, resource_list(spec.get("overhead"), "spec.overhead"))
    if names is not None:
        return {name: total.get(name, Decimal(0)) for name in names}
    return total


def pod_is_active(pod: Mapping[str, Any]) -> bool:
    """Still holds (or waits for) its resources: its phase is neither Succeeded nor Failed."""
    return (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")


def pod_is_bound(pod: Mapping[str, Any]) -> bool:
    """Bound to a node (`spec.nodeName`)."""
    return bool((pod.get("spec") or {}).get("nodeName"))
