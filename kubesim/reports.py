"""What the emulator's controllers (the schedulers' status writers, Karpenter, the DCGM exporter) do with an
object they cannot read — a quantity that is none, which a real API server would have refused: they leave
the object out of what they compute and say so, as a Warning Event on it (once per object and message, in
its namespace or `default`) and a log line. Never a silent 0, never a crash of the emulator.
"""
from __future__ import annotations

import hashlib
import logging
from typing import Any

from kubesim.util import Obj

logger = logging.getLogger("kubesim")

REASON = "InvalidQuantity"


def unreadable(store: Any, obj: Obj, error: object, component: str) -> None:
    """Report that `component` cannot read `obj` (see the module); idempotent."""
    md = obj.get("metadata") or {}
    kind = obj.get("kind") or "Pod"
    name, namespace = str(md.get("name") or ""), str(md.get("namespace") or "")
    message = f"{component} leaves {kind} {namespace + '/' if namespace else ''}{name} out: {error}"
    digest = hashlib.sha1(f"{kind}/{namespace}/{name}/{message}".encode()).hexdigest()[:16]
    event_name, event_namespace = f"{name}.{digest}", namespace or "default"
    if store.get("events", event_name, event_namespace) is not None:
        return
    logger.warning("%s", message)
    ts = store.clock.rfc3339()  # the emulator's one clock
    store.upsert("events", {
        "metadata": {"name": event_name, "namespace": event_namespace},
        "involvedObject": {"kind": kind, "apiVersion": obj.get("apiVersion") or "v1", "name": name,
                           "namespace": namespace, "uid": md.get("uid", "")},
        "reason": REASON, "message": message[:1024], "type": "Warning", "source": {"component": component},
        "firstTimestamp": ts, "lastTimestamp": ts, "count": 1, "reportingComponent": component,
    })
