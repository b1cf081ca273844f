"""What Karpenter can do for pending GPU pods, and a pool's best-practice advice, for pages of lower apps
(the pool page, the "Why is it waiting?" table of projects): places their templates name, registered in
ProvisioningConfig.ready() (ui/slots.py), so that nodepools and projects never name provisioning."""
from __future__ import annotations

from django import template

from provisioning.karpenter import NODEPOOL_LABEL
from provisioning.pending import pending_gpu_pods, pool_advice
from ui import slots

register = template.Library()


def _user(context):
    request = context.get("request")
    return getattr(request, "user", None) or context.get("user")


@register.inclusion_tag("provisioning/_pool_pending.html", takes_context=True)
def pool_pending_pods(context, pool):
    """Per Karpenter-backed pool: the pending GPU pods, this NodePool's verdict, the others', the NodeClaim."""
    backed = pool.label_key == NODEPOOL_LABEL and bool(pool.label_value)
    report = pending_gpu_pods(user=_user(context), cluster=pool.cluster, nodepool=pool.label_value) if backed else None
    return {"pool": pool, "backed": backed, "report": report}


@register.inclusion_tag("provisioning/_pool_advice.html", takes_context=True)
def pool_best_practice(context, pool):
    return {"pool": pool, "report": pool_advice(user=_user(context), pool=pool)}


@register.simple_tag(takes_context=True)
def karpenter_explanations(context):
    """{"namespace/name": PendingPod} of the pending GPU pods the user may see in the cluster of the page's
    project or department ({} without Karpenter)."""
    owner = context.get("project") or context.get("department")
    cluster = getattr(owner, "cluster", None)
    if cluster is None:
        return {}
    report = pending_gpu_pods(user=_user(context), cluster=cluster)
    return {f"{p.namespace}/{p.name}": p for p in report.pods}


@register.filter
def pending_for(explanations, waiting):
    if not explanations:
        return None
    return explanations.get(f"{waiting.namespace}/{waiting.name}")


def _explanations(context) -> dict:
    """karpenter_explanations once per page (ui.slots.memo): the head and every row of the table read it."""
    return slots.memo(context, "provisioning.karpenter_explanations", lambda: karpenter_explanations(context))


@register.inclusion_tag("provisioning/_waiting_head.html", takes_context=True)
def waiting_karpenter_head(context, _obj=None):
    """"Why is it waiting?": the head of the column "What Karpenter can do" (only with Karpenter)."""
    return {"karpenter": _explanations(context)}


@register.inclusion_tag("provisioning/_waiting_cell.html", takes_context=True)
def waiting_karpenter_cell(context, waiting):
    """"Why is it waiting?": one waiting workload's cell of the column "What Karpenter can do"."""
    karpenter = _explanations(context)
    return {"karpenter": karpenter, "k": pending_for(karpenter, waiting)}
