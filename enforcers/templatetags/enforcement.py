"""What the cluster refused of the console's writes, for the quota grid's cells: the place its template
names, filled in EnforcersConfig.ready() (ui/slots.py), so that the projects app never names enforcement."""
from __future__ import annotations

from django import template

from enforcers.models import RefusedWrite
from ui import slots

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


@register.inclusion_tag("enforcers/_quota_refusal.html", takes_context=True)
def quota_refusal(context, quota):
    """A quota grid cell: what the cluster refused of the console's writes for this owner and pool. The
    cluster's refusals are read once per page (ui.slots.memo), one query."""
    cluster_id = quota.pool.cluster_id
    refused = slots.memo(context, f"enforcers.refused.{cluster_id}", lambda: refused_writes(cluster_id))
    return {"refusal": refusal_for(refused, quota)}
