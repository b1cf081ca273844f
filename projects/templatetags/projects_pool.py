"""The organisation's part on the pages of nodepools, which never names projects: the places its templates
name, filled in ProjectsConfig.ready() (ui/slots.py)."""
from __future__ import annotations

from django import template
from django.db.models import Count, Q

from projects import selectors

register = template.Library()


@register.inclusion_tag("projects/_pool_delete_consequences.html")
def pool_delete_consequences(pool):
    """The pool's delete page: its quota rows go with it (those with deserved GPUs named), and the
    projects' priority lists lose it."""
    quotas = pool.quotas.aggregate(rows=Count("pk"), nonzero=Count("pk", filter=Q(gpu_deserved__gt=0)))
    return {"quotas": quotas,
            "quota_owners": pool.quotas.filter(gpu_deserved__gt=0).select_related("department", "project")}


@register.inclusion_tag("projects/_preview_over_quota.html", takes_context=True)
def preview_over_quota(context, preview):
    """The pool create/edit and node move previews: the workloads moved into a pool where their project's
    quota does not cover them."""
    request = context.get("request")
    return {"over_quota": selectors.preview_over_quota(user=getattr(request, "user", None), preview=preview)}
