"""Provisioning on the pages of the apps below (pool page, pool deletion, overview, quota grid), so that
nodepools and projects never name provisioning: its sections and columns fill the places their templates
name (registered in ProvisioningConfig.ready(), ui/slots.py)."""
from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal

from django import template

from access.rules import is_system_admin
from provisioning import selectors
from ui import slots
from provisioning.models import KarpenterNodePool, NodeClaim, backing_name

register = template.Library()


@register.inclusion_tag("provisioning/_blueprint.html", takes_context=True)
def pool_blueprint(context, pool):
    """The pool's Karpenter blueprint (requirements, taints, limits, disruption, conditions, NodeClaims)."""
    request = context.get("request")
    user = getattr(request, "user", None)
    return {"blueprint": selectors.pool_blueprint(user=user, pool=pool), "pool": pool,
            "can_change": bool(user) and is_system_admin(user), "request": request}


@register.inclusion_tag("provisioning/_delete_notice.html")
def pool_delete_notice(pool):
    """On the pool's delete page: a Karpenter-backed pool is deleted on the provisioning page, which asks
    whether the NodePool goes too."""
    name = backing_name(pool)
    row = KarpenterNodePool.objects.filter(cluster_id=pool.cluster_id, name=name).first() if name else None
    claims = NodeClaim.objects.filter(cluster_id=pool.cluster_id, nodepool=name).count() if name else 0
    return {"pool": pool, "name": name, "nodepool": row, "claims": claims}


@register.simple_tag
def pool_growth(capacity):
    """For the quota grid's head: the most GPUs a Karpenter-backed pool may grow to and the
    over-subscription measured against it (Σ deserved / that size); None for other pools."""
    if capacity is None:
        return None
    most = selectors.pool_growth(capacity.pool)
    if most is None:
        return None
    ratio = (capacity.deserved / Decimal(most)).quantize(Decimal("0.01"), rounding=ROUND_HALF_UP) if most else None
    return {"most": most, "ratio": ratio, "oversubscribed": capacity.deserved > most}


@register.simple_tag
def any_growth(capacities) -> bool:
    """Whether any pool of the grid is Karpenter-backed with a GPU limit (its growth rows are shown)."""
    return any(c is not None and selectors.pool_growth(c.pool) is not None for c in capacities or ())


def _growing(context, capacities=None) -> bool:
    """Whether the page's pools show their growth columns: once per page (ui.slots.memo), from the
    capacities its table lists (the context's `capacity`, as the overview and the quota grid name them)."""
    return slots.memo(context, "provisioning.growing",
                      lambda: any_growth(context.get("capacity") if capacities is None else capacities))


@register.inclusion_tag("provisioning/_capacity_growth_head.html", takes_context=True)
def capacity_growth_head(context, capacities):
    """The overview's capacity table: the head of the growth columns, when a pool may grow."""
    return {"growing": _growing(context, capacities)}


@register.inclusion_tag("provisioning/_capacity_growth_cells.html", takes_context=True)
def capacity_growth_cells(context, capacity):
    """The overview's capacity table: one pool's growth cells, when the table shows the growth columns."""
    growing = _growing(context)
    return {"growing": growing, "g": pool_growth(capacity) if growing else None}


@register.inclusion_tag("provisioning/_quota_growth_rows.html")
def quota_growth_rows(capacities):
    """The quota grid's head: the rows of the pools' growth, when a pool may grow."""
    return {"capacity": capacities, "growing": any_growth(capacities)}


@register.inclusion_tag("provisioning/_pool_list_add.html")
def pool_list_add(_obj=None):
    """The pool list, beside "Add node pool" (only for those who may add): the Karpenter-backed way."""
    return {}


@register.inclusion_tag("provisioning/_pool_form_notice.html")
def pool_form_notice(pool):
    """On the pool's edit form: a backed pool's GPU limit is its NodePool's GPU limit (kube.requests.GPU) too."""
    return {"pool": pool, "name": backing_name(pool) if pool is not None else ""}
