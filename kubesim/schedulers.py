"""What the schedulers' controllers report about their queues, in one call the controller loop and chaos make.

The schedulers themselves are in :mod:`kubesim.scheduling`:

- KAI ``scheduling.run.ai/v2`` Queue ``status.allocated`` / ``allocatedNonPreemptible`` / ``requested``
  (GPU in devices, CPU in millicpus, memory in megabytes, as ResourceList quantities) and PodGroup
  ``status.resourcesStatus``, as KAI's queue and podgroup controllers sum them from the PodGroups of the
  pods of ``kai-scheduler`` (:meth:`kubesim.scheduling.adapter.SchedulingMixin.report_kai_status`);
- Kueue's ClusterQueue and LocalQueue status come from its admissions (:mod:`kubesim.scheduling.kueue`,
  written by ``kueue_step``), not from pods.
"""
from __future__ import annotations


class SchedulerStatusMixin:
    """Part of :class:`kubesim.KubeEmulator`."""

    #: The node label whose value names a node's pool (the console's pool label).
    flavor_label = "console.gpu-capacity.io/node-pool"

    def report_queue_status(self) -> int:
        """Write the status KAI would report for its queues and PodGroups; returns how many changed (nothing
        is read when nothing it depends on changed)."""
        return self.report_kai_status()

    def _set_status(self, resource: str, obj: dict, status: dict) -> int:
        """Write ``status`` into the object's status subresource unless it already says so; 1 if written."""
        current = obj.get("status") or {}
        if all(current.get(k) == v for k, v in status.items()):
            return 0
        md = obj["metadata"]

        def change(o: dict) -> None:
            o.setdefault("status", {}).update(status)

        self.update(resource, md["name"], change, md.get("namespace") or "", subresource="status")
        return 1
