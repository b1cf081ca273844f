"""What the cluster refused of the console's writes, for the quota grid's cells (loaded by its
template, so that the projects app never imports enforcement)."""
from __future__ import annotations

from django import template

from enforcers.models import RefusedWrite

register = template.Library()


@register.simple_tag
def refused_writes(cluster) -> dict:
    """The cluster's refused writes by (owner, pool id); a refusal of an object spanning pools (a Kueue
    ClusterQueue) is keyed with pool None and shows in every pool of its owner. One query."""
    out: dict = {}
    for refusal in RefusedWrite.objects.filter(cluster=cluster).exclude(owner=""):
        out.setdefault((refusal.owner, refusal.pool_id), refusal)
    return out


@register.filter
def refusal_for(refused: dict, quota):
    if not refused:
        return None
    owner = f"project.{quota.project.name}" if quota.project_id else f"department.{quota.department.name}"
    return refused.get((owner, quota.pool_id)) or refused.get((owner, None))
