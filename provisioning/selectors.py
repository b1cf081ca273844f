"""Reads of provisioning, each taking the user (restricted through access.rules)."""
from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from kube.taints import taint_text
from nodepools.models import NodePool
from provisioning import karpenter
from provisioning.models import KarpenterNodePool, NodeClaim, backing_name
from ui.formats import quantity_text

LIMIT_ORDER = ("cpu", "memory", karpenter.GPU, "nodes")
PHASE_ORDER = {p: i for i, p in enumerate(
    ["Launching", "LaunchFailed", "Launched", "Registered", "Initialized", "Consolidatable", "Empty", "Drifted", "Terminating"])}


@dataclass
class LimitRow:
    resource: str
    limit: str  # '' = no limit
    provisioned: str
    full: bool  # provisioned reached the limit: Karpenter launches no more for this pool
    limit_text: str = ""  # in human units ("8 TiB", "960 cores"); '' = no limit
    provisioned_text: str = ""


@dataclass
class Blueprint:
    pool: NodePool
    name: str  # the NodePool's name (the pool's label value)
    nodepool: KarpenterNodePool | None  # None: the cluster has no such NodePool (yet)
    requirements: list[tuple[str, dict]] = field(default_factory=list)
    taints: list[str] = field(default_factory=list)
    startup_taints: list[str] = field(default_factory=list)
    labels: dict[str, str] = field(default_factory=dict)
    limits: list[LimitRow] = field(default_factory=list)
    disruption: dict[str, Any] = field(default_factory=dict)
    budgets: list[str] = field(default_factory=list)
    expire_after: str = ""
    termination_grace_period: str = ""
    conditions: list[dict] = field(default_factory=list)
    nodeclaims: list[NodeClaim] = field(default_factory=list)
    node_class: str = ""


def _as_number(value: Any) -> Decimal | None:
    return karpenter.quantity(value) if value not in (None, "") else None


def budget_words(budget: dict[str, Any]) -> str:
    """A disruption budget in words: "At most 10% of the nodes disrupted at once, for any reason"."""
    nodes = str(budget.get("nodes", "10%"))
    if nodes in ("0", "0%"):
        text = "No node disrupted"
    elif nodes.endswith("%"):
        text = f"At most {nodes} of the nodes disrupted at once"
    else:
        text = f"At most {nodes} node{'s' if nodes != '1' else ''} disrupted at once"
    reasons = budget.get("reasons")
    text += ", for " + ", ".join(reasons) if reasons else ", for any reason"
    if budget.get("schedule"):
        text += f", during {budget.get('duration', '')} from each '{budget['schedule']}' (UTC)"
    return text


def pool_blueprint(*, user: Any, pool: NodePool) -> Blueprint | None:
    """The blueprint of a Karpenter-backed pool as the user may see it; None for a pool not backed."""
    name = backing_name(pool)
    if not name or not NodePool.objects.restrict(user, "view").filter(pk=pool.pk).exists():
        return None
    row = KarpenterNodePool.objects.restrict(user, "view").filter(cluster_id=pool.cluster_id, name=name).first()
    blueprint = Blueprint(pool=pool, name=name, nodepool=row)
    claims = list(NodeClaim.objects.restrict(user, "view").filter(cluster_id=pool.cluster_id, nodepool=name))
    claims.sort(key=lambda c: (PHASE_ORDER.get(c.phase, 99), c.name))
    blueprint.nodeclaims = claims
    if row is None:
        return blueprint
    spec = row.spec or {}
    template = spec.get("template") or {}
    tspec = template.get("spec") or {}
    blueprint.requirements = [(karpenter.requirement_words(r), r) for r in tspec.get("requirements") or []
                              if isinstance(r, dict)]
    blueprint.taints = [taint_text(t) for t in tspec.get("taints") or [] if isinstance(t, dict)]
    blueprint.startup_taints = [taint_text(t) for t in tspec.get("startupTaints") or [] if isinstance(t, dict)]
    blueprint.labels = (template.get("metadata") or {}).get("labels") or {}
    ref = tspec.get("nodeClassRef") or {}
    blueprint.node_class = f"{ref.get('kind', '')} {ref.get('name', '')}".strip()
    limits, provisioned = row.limits or {}, row.resources or {}
    names = [n for n in LIMIT_ORDER if n in limits or n in provisioned] + sorted(
        n for n in set(limits) | set(provisioned) if n not in LIMIT_ORDER)
    for resource in names:
        limit, have = limits.get(resource), provisioned.get(resource)
        if resource == "nodes" and have is None:
            have = row.node_count
        lim, now = _as_number(limit), _as_number(have if have is not None else 0)
        blueprint.limits.append(LimitRow(
            resource, "" if limit is None else str(limit), "0" if have is None else str(have),
            lim is not None and now is not None and now >= lim,
            # Human units; an unparsable value is shown as the cluster wrote it.
            limit_text="" if limit is None else quantity_text(resource, lim) if lim is not None else str(limit),
            provisioned_text=quantity_text(resource, now) if now is not None else str(have)))
    disruption = spec.get("disruption") or {}
    blueprint.disruption = {"policy": disruption.get("consolidationPolicy", "WhenEmptyOrUnderutilized"),
                            "after": disruption.get("consolidateAfter", "0s")}
    blueprint.budgets = [budget_words(b) for b in disruption.get("budgets") or [{"nodes": "10%"}] if isinstance(b, dict)]
    blueprint.expire_after = tspec.get("expireAfter", "720h")
    blueprint.termination_grace_period = tspec.get("terminationGracePeriod", "")
    conditions = [c for c in row.conditions or [] if isinstance(c, dict)]
    order = {t: i for i, t in enumerate(karpenter.NODEPOOL_CONDITIONS)}
    blueprint.conditions = sorted(conditions, key=lambda c: (order.get(c.get("type"), 99), str(c.get("type"))))
    for kind in karpenter.NODEPOOL_CONDITIONS[:3]:
        if kind not in {c.get("type") for c in conditions}:
            blueprint.conditions.append({"type": kind, "status": "Unknown", "reason": "NotReported",
                                         "message": "Karpenter has not reported this condition (yet)."})
    return blueprint


def pool_growth(pool: NodePool) -> int | None:
    """The most GPUs a Karpenter-backed pool may grow to (its limit, one value with the NodePool's
    GPU limit, kube.requests.GPU); None for a pool not backed or without a GPU limit."""
    if not backing_name(pool):
        return None
    return pool.gpu_limit
