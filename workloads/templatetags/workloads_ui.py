"""The pool page's "Platforms" section and the units of the platform pages. Loaded by the pool page's
template, so that the projects app (which renders that page) never imports this app."""
from __future__ import annotations

from decimal import Decimal

from django import template

from ui.formats import number
from workloads import selectors, services

register = template.Library()

GIB = Decimal(2**30)


@register.filter
def cores(millis) -> str:
    """Millicores as cores (e.g. 1.5)."""
    if millis is None:
        return "—"
    return number(round(Decimal(millis) / 1000, 2))


@register.filter
def gib(amount) -> str:
    """Bytes as GiB (e.g. 31.5)."""
    if amount is None:
        return "—"
    return number(round(Decimal(amount) / GIB, 1))


@register.inclusion_tag("workloads/_pool_platforms_section.html", takes_context=True)
def pool_platforms_section(context, pool) -> dict:
    """The pool's platforms (those the user may see) with their nodes and GPUs total / free."""
    request = context.get("request")
    user = getattr(request, "user", None)
    data = selectors.pool_platforms(user=user, pool=pool, with_rows=False)
    return {"pool": pool, "data": data,
            "can_change": services.may_configure(user, pool.cluster_id, "platform", "add")}


@register.inclusion_tag("workloads/_preview_platforms.html", takes_context=True)
def preview_platforms_left_empty(context, preview) -> dict:
    """The pool create/edit and node move previews (nodepools' place "capacity-preview.consequences"):
    the platforms the change leaves without nodes."""
    request = context.get("request")
    return {"left_empty": selectors.platforms_left_without_nodes(user=getattr(request, "user", None), preview=preview)}
