"""The pool page's line about submitting: who may submit to the pool, and its workloads. It fills a place
the pool page's template names (registered in WorkloadsConfig.ready(), ui/slots.py), so that neither
nodepools nor projects (which renders that page) names this app."""
from __future__ import annotations

from django import template

from workloads.submission import may_change_access

register = template.Library()


@register.inclusion_tag("workloads/_pool_submit_line.html", takes_context=True)
def pool_submit_line(context, pool) -> dict:
    request = context.get("request")
    user = getattr(request, "user", None)
    return {"pool": pool, "access": getattr(pool, "access", None),
            "can_change": user is not None and may_change_access(user, pool)}
