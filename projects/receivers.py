"""The projects app's reactions to what happens on the floor below (nodepools' signals)."""
from __future__ import annotations

from typing import Any

from django.dispatch import receiver

from nodepools import signals
from projects.models import Project
from projects.services import quota_rows_create_for_pool


@receiver(signals.pool_created, dispatch_uid="projects.zero_quota_rows")
def _zero_quota_rows(sender: Any, *, pool, **kwargs: Any) -> None:
    quota_rows_create_for_pool(pool=pool)


@receiver(signals.cluster_deleting, dispatch_uid="projects.cluster_organisation")
def _delete_organisation(sender: Any, *, cluster, **kwargs: Any) -> None:
    # Projects are protected by their departments; delete them first, the cascade does the rest.
    Project.objects.filter(cluster=cluster).delete()
