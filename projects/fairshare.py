"""Fair share of one node pool's GPUs (docs/concepts.md#over-quota), as a pure function for display.

Deserved quota is served first, rank by rank (highest first); what is left idle is then split, rank by
rank, between those that want more, in proportion to their over-quota weight:

    OQ = w / Σw (same rank) × idle;  fair share = min(deserved + OQ, requested, limit)

The split is water-filling: whoever reaches its requested amount or its limit takes no more, and the
rest goes to the others of the same rank, then to the next rank down. When the pool cannot even serve
the deserved quota of one rank, that rank shares what is left in proportion to deserved.
Departments are balanced first, then the projects inside each department share its fair share.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from typing import Hashable, Sequence

ZERO = Decimal(0)
PLACES = Decimal("0.001")


@dataclass(frozen=True)
class Claim:
    """One department's or project's stake in a pool. `requested`/`limit` None: unbounded."""

    key: Hashable
    deserved: Decimal = ZERO
    requested: Decimal | None = None
    limit: Decimal | None = None
    weight: int = 2
    rank: int = 3
    children: Sequence["Claim"] = field(default_factory=tuple)


def _cap(claim: Claim) -> Decimal | None:
    """The most this claim can take: the smaller of requested and limit (None: no bound)."""
    bounds = [Decimal(b) for b in (claim.requested, claim.limit) if b is not None]
    return min(bounds) if bounds else None


def _room(cap: Decimal | None, given: Decimal) -> Decimal | None:
    return None if cap is None else max(cap - given, ZERO)


def fair_shares(capacity: Decimal, claims: Sequence[Claim]) -> dict[Hashable, Decimal]:
    """Each claim's fair share of `capacity` (rounded to 0.001)."""
    remaining = max(Decimal(capacity), ZERO)
    caps = {c.key: _cap(c) for c in claims}
    share: dict[Hashable, Decimal] = {c.key: ZERO for c in claims}
    ranks = sorted({c.rank for c in claims}, reverse=True)

    # 1. Deserved, highest rank first.
    for rank in ranks:
        wants = {}
        for c in claims:
            if c.rank == rank:
                want = max(Decimal(c.deserved), ZERO)
                if caps[c.key] is not None:
                    want = min(want, caps[c.key])
                wants[c.key] = want
        total = sum(wants.values(), ZERO)
        if total <= remaining:
            for key, want in wants.items():
                share[key] += want
            remaining -= total
        else:
            for key, want in wants.items():
                share[key] += want * remaining / total
            remaining = ZERO

    # 2. Idle capacity, highest rank first, by over-quota weight (water-filling).
    for rank in ranks:
        if remaining <= 0:
            break
        active = [c for c in claims if c.rank == rank and c.weight > 0
                  and (caps[c.key] is None or caps[c.key] > share[c.key])]
        while remaining > 0 and active:
            total_weight = Decimal(sum(c.weight for c in active))
            portions = {c.key: remaining * c.weight / total_weight for c in active}
            full = [c for c in active
                    if caps[c.key] is not None and share[c.key] + portions[c.key] >= caps[c.key]]
            if not full:
                for c in active:
                    share[c.key] += portions[c.key]
                remaining = ZERO
                break
            for c in full:
                room = _room(caps[c.key], share[c.key])
                share[c.key] += room
                remaining -= room
            active = [c for c in active if c not in full]
    return {key: value.quantize(PLACES) for key, value in share.items()}


def hierarchical_fair_shares(capacity: Decimal, departments: Sequence[Claim]) -> dict[Hashable, Decimal]:
    """Fair shares of departments (balanced first) and of their projects (`Claim.children`), which
    share their department's fair share. A department's requested amount is its projects' total
    (capped by its own `requested` if given)."""
    effective = []
    for d in departments:
        requested = d.requested
        if d.children:
            child_requests = [c.requested for c in d.children]
            total = None if any(r is None for r in child_requests) else sum((Decimal(r) for r in child_requests), ZERO)
            requested = total if requested is None else (requested if total is None else min(Decimal(requested), total))
        effective.append(Claim(d.key, d.deserved, requested, d.limit, d.weight, d.rank))
    result = fair_shares(capacity, effective)
    for d in departments:
        if d.children:
            result.update(fair_shares(result[d.key], d.children))
    return result
