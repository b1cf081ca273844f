"""The workloads app's reactions to what happens on the floors below."""
from __future__ import annotations

from typing import Any

from django.db.models.signals import post_save
from django.dispatch import receiver

from nodepools.models import Cluster
from workloads.services import workloads_defaults


@receiver(post_save, sender=Cluster, dispatch_uid="workloads.cluster_defaults")
def _cluster_defaults(sender: Any, *, instance: Cluster, created: bool, raw: bool = False, **kwargs: Any) -> None:
    # A new cluster gets OSMO's shipped resource validation rule sets (default_cpu, default_memory, ...).
    if created and not raw:
        workloads_defaults(cluster=instance)
