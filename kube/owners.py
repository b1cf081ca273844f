"""Who made an object and who schedules a pod, in Kubernetes' words (standard library only).

- `metadata.ownerReferences` (Kubernetes "Owners and Dependents"): the reference with `controller: true` is
  the object managing it (a Job, a ReplicaSet, a StatefulSet, ...); a pod without one is a bare pod.
- `spec.schedulerName` (Kubernetes "Configure Multiple Schedulers"): the scheduler that places the pod; empty
  means the default scheduler, `default-scheduler`.
"""
from __future__ import annotations

from typing import Any

from kube.wellknown import DEFAULT_SCHEDULER_NAME

BARE_POD = "Pod"  # the kind the console names a pod with no controller by (it is its own owner)


def controller_of(metadata: Any) -> tuple[str, str]:
    """(kind, name) of the controller owning an object (`ownerReferences[].controller: true`), else the first
    owner's; ("", "") when it has none (a bare pod). Malformed references read as none."""
    refs = metadata.get("ownerReferences") if isinstance(metadata, dict) else None
    if not isinstance(refs, list):
        return "", ""
    refs = [r for r in refs if isinstance(r, dict) and isinstance(r.get("kind"), str) and isinstance(r.get("name"), str)]
    chosen = next((r for r in refs if r.get("controller") is True), refs[0] if refs else None)
    if chosen is None:
        return "", ""
    return chosen["kind"][:63], chosen["name"][:253]


def scheduler_of(spec: Any) -> str:
    """The pod's scheduler (`spec.schedulerName`), `default-scheduler` when it names none."""
    name = spec.get("schedulerName") if isinstance(spec, dict) else None
    return name[:253] if isinstance(name, str) and name else DEFAULT_SCHEDULER_NAME
