"""Why a GPU workload is not getting a node: what Karpenter can do for a pending pod (Karpenter's
"typical behaviour": a pool is selected, a NodeClaim is created from it, a node is provisioned).

Pure functions over the raw Kubernetes JSON (``karpenter.sh/v1`` NodePool and NodeClaim objects, a pod's
metadata and spec, optionally the pod's events), no Django. For a pending pod, every NodePool is judged
in Karpenter's order (``weight`` highest first, then name) and, when it cannot provision for the pod,
with the FIRST reason that holds:

1. ``requirements``: the pool's requirements (``spec.template.spec.requirements`` plus its template labels
   and ``karpenter.sh/nodepool``) exclude the pod's ``nodeSelector`` or required node affinity, by
   Karpenter's rules: a key both define must leave some value (``In NotIn Exists DoesNotExist Gt Lt``,
   also ``Gte Lte``); a key only the pod names is fine for the well-known labels (the pool may launch any
   instance type, zone, ...) and for ``NotIn``/``DoesNotExist``, and otherwise "has no known values";
   a pool whose ``karpenter.k8s.aws/instance-gpu-count`` allows fewer GPUs than the pod asks on one node;
2. ``taint``: a template taint (``NoSchedule``/``NoExecute``) the pod does not tolerate (startup taints do
   not count: they are removed once the node is initialized);
3. ``limit``: provisioning one more node for the pod would pass the pool's ``limits`` (``status.resources``
   is what is provisioned now), e.g. "nvidia.com/gpu 32 of 32";
4. ``budget``: the limit is reached and the disruption budgets allow no node of the pool to be
   consolidated now (or consolidation is off), so Karpenter cannot make room in it either.

Then the NodeClaim launched for the pod, if any: the one a ``Nominated`` event of the pod names ("Pod
should schedule on: nodeclaim/<name>"), otherwise a NodeClaim not yet initialized whose labels and
requirements admit the pod and whose requested resources cover it.
"""
from __future__ import annotations

import datetime as dt
import math
import re
from dataclasses import dataclass
from decimal import Decimal
from kube import wellknown
from typing import Any, Iterable, Mapping, Sequence

from common.parsing import is_digits
from kube.quantity import QuantityError, parse_quantity
from kube.requests import CPU, GPU as GPU_RESOURCE, MEMORY, pod_requests
from kube.taints import first_untolerated_taint, taint_text
from common.words import noun
from provisioning import karpenter
from provisioning.karpenter import NODEPOOL_LABEL
from ui.formats import quantity_text

CAPACITY_TYPE_LABEL = wellknown.KARPENTER_CAPACITY_TYPE_LABEL
GPU_COUNT_LABEL = "karpenter.k8s.aws/instance-gpu-count"
# What a pod asks that a verdict weighs (kube.requests.pod_requests; a quantity that is none raises
# QuantityError, and `explain` says so instead of judging).
ASKED = (GPU_RESOURCE, CPU, MEMORY)

# Labels Karpenter knows the values of from its instance types (core's WellKnownLabels and the AWS
# provider's): a pod may ask for one a pool leaves open, the pool then launches an instance that has it.
WELL_KNOWN_LABELS = frozenset({
    "node.kubernetes.io/instance-type", "beta.kubernetes.io/instance-type",
    "topology.kubernetes.io/zone", "failure-domain.beta.kubernetes.io/zone",
    "topology.kubernetes.io/region", "failure-domain.beta.kubernetes.io/region",
    "kubernetes.io/arch", "beta.kubernetes.io/arch", "kubernetes.io/os", "beta.kubernetes.io/os",
    "node.kubernetes.io/windows-build", NODEPOOL_LABEL, CAPACITY_TYPE_LABEL, wellknown.KARPENTER_CAPACITY_RESERVATION_LABEL,
    "topology.k8s.aws/zone-id",
})
WELL_KNOWN_PREFIXES = ("karpenter.k8s.aws/",)


# ---------------------------------------------------------------------------------------------------
# Requirement sets (Karpenter's scheduling.Requirement: values or their complement, with integer bounds)

@dataclass(frozen=True)
class Requirement:
    key: str
    complement: bool  # True: every value but `values`
    values: frozenset[str] = frozenset()
    greater_than: int | None = None
    less_than: int | None = None
    operator: str = "In"
    text: str = ""

    @classmethod
    def of(cls, key: str, operator: str, values: Iterable[str] = ()) -> "Requirement":
        values = [str(v) for v in (values or [])]
        shown = f"{key} {operator}" + (f" [{', '.join(values)}]" if values else "")
        first = _int(values[0]) if values else None
        if operator == "In":
            return cls(key, False, frozenset(values), operator=operator, text=shown)
        if operator == "NotIn":
            return cls(key, True, frozenset(values), operator=operator, text=shown)
        if operator == "Exists":
            return cls(key, True, operator=operator, text=shown)
        if operator == "DoesNotExist":
            return cls(key, False, operator=operator, text=shown)
        if operator in ("Gt", "Gte"):
            bound = None if first is None else (first if operator == "Gt" else first - 1)
            return cls(key, True, greater_than=bound, operator=operator, text=shown)
        if operator in ("Lt", "Lte"):
            bound = None if first is None else (first if operator == "Lt" else first + 1)
            return cls(key, True, less_than=bound, operator=operator, text=shown)
        # An operator Karpenter does not know admits nothing.
        return cls(key, False, operator=operator, text=shown)

    def _within(self, value: str) -> bool:
        if self.greater_than is None and self.less_than is None:
            return True
        number = _int(value)
        if number is None:
            return False
        return (self.greater_than is None or number > self.greater_than) and (
            self.less_than is None or number < self.less_than)

    def intersection(self, other: "Requirement") -> "Requirement":
        gt = _max_none(self.greater_than, other.greater_than)
        lt = _min_none(self.less_than, other.less_than)
        negative = ("NotIn", "DoesNotExist")
        operator = self.operator if self.operator == other.operator else (
            "NotIn" if self.operator in negative and other.operator in negative else "In")
        text = self.text if self.text == other.text else f"{self.text} and {other.text}"
        if self.complement and other.complement:
            return Requirement(self.key, True, self.values | other.values, gt, lt, operator, text)
        if self.complement:
            values = other.values - self.values
        elif other.complement:
            values = self.values - other.values
        else:
            values = self.values & other.values
        bounded = Requirement(self.key, False, frozenset(), gt, lt)
        return Requirement(self.key, False, frozenset(v for v in values if bounded._within(v)), gt, lt, operator, text)

    def empty(self) -> bool:
        if not self.complement:
            return not self.values
        return self.greater_than is not None and self.less_than is not None and self.less_than - self.greater_than <= 1

    def max_int(self) -> int | None:
        """The largest integer value it admits (None: unbounded or none)."""
        if self.complement:
            return None if self.less_than is None else self.less_than - 1
        numbers = [n for n in (_int(v) for v in self.values) if n is not None and self._within(str(n))]
        return max(numbers) if numbers else None


def _int(value: Any) -> int | None:
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return None


def _max_none(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else max(a, b)


def _min_none(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else min(a, b)


def is_well_known(key: str) -> bool:
    return key in WELL_KNOWN_LABELS or key.startswith(WELL_KNOWN_PREFIXES)


def nodepool_requirements(nodepool: Mapping[str, Any]) -> dict[str, Requirement]:
    """A NodePool's requirements by key: its template's requirements, template labels and its own name."""
    template = (nodepool.get("spec") or {}).get("template") or {}
    out: dict[str, Requirement] = {}

    def add(req: Requirement) -> None:
        out[req.key] = out[req.key].intersection(req) if req.key in out else req

    for raw in (template.get("spec") or {}).get("requirements") or []:
        if isinstance(raw, Mapping) and raw.get("key"):
            add(Requirement.of(str(raw["key"]), str(raw.get("operator") or ""), raw.get("values") or []))
    for key, value in ((template.get("metadata") or {}).get("labels") or {}).items():
        add(Requirement.of(str(key), "In", [str(value)]))
    name = (nodepool.get("metadata") or {}).get("name")
    if name:
        add(Requirement.of(NODEPOOL_LABEL, "In", [name]))
    return out


def pod_requirement_terms(pod: Mapping[str, Any]) -> list[list[Requirement]]:
    """The pod's node requirements: its nodeSelector AND one of its required node affinity terms (each a
    list of requirements; an empty affinity gives one term of the selector alone)."""
    spec = pod.get("spec") or {}
    selector = [Requirement.of(str(k), "In", [str(v)]) for k, v in (spec.get("nodeSelector") or {}).items()]
    required = (((spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    terms = [t for t in (required.get("nodeSelectorTerms") or []) if isinstance(t, Mapping)]
    if not terms:
        return [selector]
    out = []
    for term in terms:
        reqs = list(selector)
        for expr in term.get("matchExpressions") or []:
            if isinstance(expr, Mapping) and expr.get("key"):
                reqs.append(Requirement.of(str(expr["key"]), str(expr.get("operator") or ""), expr.get("values") or []))
        out.append(reqs)
    return out


def incompatibility(pool: Mapping[str, Requirement], pod: Sequence[Requirement]) -> str | None:
    """Karpenter's Requirements.Compatible (undefined well-known labels allowed): None when compatible,
    else what excludes the pod (one sentence)."""
    merged: dict[str, Requirement] = {}
    for req in pod:
        merged[req.key] = merged[req.key].intersection(req) if req.key in merged else req
    for key, incoming in merged.items():
        existing = pool.get(key)
        if existing is None:
            if is_well_known(key) or incoming.operator in ("NotIn", "DoesNotExist"):
                continue
            return f"label {key} has no known values in the pool (the pod asks {incoming.text})"
        if existing.intersection(incoming).empty():
            if incoming.operator in ("NotIn", "DoesNotExist") and existing.operator in ("NotIn", "DoesNotExist"):
                continue
            return f"the pod asks {incoming.text}, the pool allows {existing.text}"
    return None


# ---------------------------------------------------------------------------------------------------
# Taints and tolerations

def untolerated_taint(nodepool: Mapping[str, Any], pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The first template taint (NoSchedule / NoExecute) the pod does not tolerate; startup taints do not count."""
    template_spec = (((nodepool.get("spec") or {}).get("template") or {}).get("spec") or {})
    return first_untolerated_taint(template_spec.get("taints"), (pod.get("spec") or {}).get("tolerations"))


# ---------------------------------------------------------------------------------------------------
# Limits

def _fmt(value: Decimal, resource: str) -> str:
    """In human units: memory as GiB / TiB, cpu as cores, GPUs and nodes as numbers."""
    return quantity_text(resource, value)


def _n(value: Decimal) -> str:
    value = Decimal(value).normalize()
    text = f"{value:f}"
    return text


def limit_reached(nodepool: Mapping[str, Any], asks: Mapping[str, Decimal]) -> tuple[str, Decimal, Decimal] | None:
    """(resource, provisioned, limit) of the first limit one more node for the pod would pass."""
    limits = (nodepool.get("spec") or {}).get("limits") or {}
    used = (nodepool.get("status") or {}).get("resources") or {}
    for resource in sorted(limits, key=lambda r: (r != GPU_RESOURCE, r)):
        try:
            limit = parse_quantity(limits[resource])
            current = parse_quantity(used.get(resource, 0))
        except QuantityError:
            continue  # the API server refuses such a NodePool: only a hand-made one has it
        need = Decimal(1) if resource == "nodes" else asks.get(resource, Decimal(0))
        if resource != "nodes" and need <= 0:
            # A limit on what the pod does not ask still stops a new node once it is reached.
            if current >= limit:
                return resource, current, limit
            continue
        if current + need > limit:
            return resource, current, limit
    return None


# ---------------------------------------------------------------------------------------------------
# Disruption budgets (Karpenter: the smallest `nodes` of the budgets active now; a percentage of the
# pool's nodes rounded up; a budget with a schedule is active for `duration` after each firing)

_MACROS = {"@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *", "@weekly": "0 0 * * 0",
           "@daily": "0 0 * * *", "@midnight": "0 0 * * *", "@hourly": "0 * * * *"}
_DURATION_RE = re.compile(r"^(?:(\d+)h)?(?:(\d+)m)?(?:0s)?$")


_NAMES = {name: i for i, name in enumerate(("sun", "mon", "tue", "wed", "thu", "fri", "sat"))}
_NAMES.update({name: i + 1 for i, name in enumerate(("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep",
                                                      "oct", "nov", "dec"))})


def _cron_field(text: str, low: int, high: int) -> set[int] | None:
    values: set[int] = set()
    text = re.sub(r"[A-Za-z]{3}", lambda m: str(_NAMES.get(m.group(0).lower(), m.group(0))), text)
    for part in text.split(","):
        step = 1
        if "/" in part:
            part, _, step_text = part.partition("/")
            if not is_digits(step_text) or int(step_text) == 0:
                return None
            step = int(step_text)
        if part in ("*", "?"):
            start, end = low, high
        elif "-" in part:
            a, _, b = part.partition("-")
            if not (is_digits(a) and is_digits(b)):
                return None
            start, end = int(a), int(b)
        elif is_digits(part):
            start = end = int(part)
            if step != 1:
                end = high
        else:
            return None
        values.update(range(start, end + 1, step))
    return values


def cron_matches(schedule: str, when: dt.datetime) -> bool | None:
    """Whether a 5-field cron schedule (or macro) fires at the minute `when` (UTC); None if unreadable."""
    text = _MACROS.get(schedule.strip(), schedule.strip())
    parts = text.split()
    if len(parts) != 5:
        return None
    fields = [_cron_field(p, lo, hi) for p, (lo, hi) in zip(parts, ((0, 59), (0, 23), (1, 31), (1, 12), (0, 7)))]
    if any(f is None for f in fields):
        return None
    minute, hour, dom, month, dow = fields
    weekday = (when.weekday() + 1) % 7  # cron: Sunday 0 (and 7)
    day_ok = when.day in dom
    dow_ok = weekday in dow or (weekday == 0 and 7 in dow)
    if parts[2] not in ("*", "?") and parts[4] not in ("*", "?"):
        days = day_ok or dow_ok
    else:
        days = day_ok and dow_ok
    return when.minute in minute and when.hour in hour and when.month in month and days


def _duration_minutes(text: str) -> int | None:
    m = _DURATION_RE.match(text or "")
    if not m or not (m.group(1) or m.group(2)):
        return None
    return int(m.group(1) or 0) * 60 + int(m.group(2) or 0)


def budget_active(budget: Mapping[str, Any], now: dt.datetime) -> bool:
    schedule, duration = budget.get("schedule"), budget.get("duration")
    if not schedule:
        return True
    minutes = _duration_minutes(str(duration or ""))
    if minutes is None:
        return False
    start = now.astimezone(dt.UTC).replace(second=0, microsecond=0)
    for back in range(0, min(minutes, 60 * 24 * 31)):  # a firing within the last `duration`
        if cron_matches(str(schedule), start - dt.timedelta(minutes=back)):
            return True
    return False


def allowed_disruptions(nodepool: Mapping[str, Any], nodes: int, now: dt.datetime, reason: str = "Underutilized"
                        ) -> tuple[int, Mapping[str, Any] | None]:
    """How many of the pool's `nodes` may be disrupted now for `reason`, and the budget that decides it."""
    disruption = (nodepool.get("spec") or {}).get("disruption") or {}
    budgets = disruption.get("budgets")
    if budgets is None:
        budgets = [{"nodes": "10%"}]
    allowed, deciding = math.inf, None
    for budget in budgets:
        if not isinstance(budget, Mapping):
            continue
        reasons = budget.get("reasons")
        if reasons and reason not in reasons:
            continue
        if not budget_active(budget, now):
            continue
        text = str(budget.get("nodes") or "10%")
        if text.endswith("%"):
            value = math.ceil(nodes * int(text[:-1] or 0) / 100) if is_digits(text[:-1]) else 0
        else:
            value = int(text) if is_digits(text) else 0
        if value < allowed:
            allowed, deciding = value, budget
    return (nodes if allowed is math.inf else int(allowed)), deciding


# ---------------------------------------------------------------------------------------------------
# NodeClaims

NOMINATED_RE = re.compile(r"nodeclaim/([a-z0-9]([-a-z0-9.]*[a-z0-9])?)")


IN_FLIGHT = ("Launching", "Launched", "Registered")


def nodeclaim_phase(claim: Mapping[str, Any]) -> str:
    """Where a NodeClaim is in its life (provisioning.karpenter.nodeclaim_phase of its conditions)."""
    return karpenter.nodeclaim_phase((claim.get("status") or {}).get("conditions"),
                                     deleting=bool((claim.get("metadata") or {}).get("deletionTimestamp")))


def claim_requirements(claim: Mapping[str, Any]) -> dict[str, Requirement]:
    out: dict[str, Requirement] = {}
    for raw in (claim.get("spec") or {}).get("requirements") or []:
        if isinstance(raw, Mapping) and raw.get("key"):
            req = Requirement.of(str(raw["key"]), str(raw.get("operator") or ""), raw.get("values") or [])
            out[req.key] = out[req.key].intersection(req) if req.key in out else req
    for key, value in ((claim.get("metadata") or {}).get("labels") or {}).items():
        req = Requirement.of(str(key), "In", [str(value)])
        out[key] = out[key].intersection(req) if key in out else req
    return out


def launching_for(pod: Mapping[str, Any], claims: Iterable[Mapping[str, Any]],
                  events: Iterable[Mapping[str, Any]] = ()) -> Mapping[str, Any] | None:
    """The NodeClaim being launched for the pod: named by its latest Nominated event, else a NodeClaim
    not yet initialized that admits the pod (labels/requirements, taints) and covers its GPUs."""
    claims = [c for c in claims if isinstance(c, Mapping)]
    by_name = {(c.get("metadata") or {}).get("name"): c for c in claims}
    md = pod.get("metadata") or {}
    nominated, taken = None, set()
    for event in events or []:
        if event.get("reason") != "Nominated":
            continue
        involved = event.get("involvedObject") or event.get("regarding") or {}
        match = NOMINATED_RE.search(str(event.get("message") or event.get("note") or ""))
        if not match or match.group(1) not in by_name:
            continue
        if involved.get("kind", "Pod") == "Pod" and involved.get("name") == md.get("name") and (
                involved.get("namespace") or md.get("namespace")) == md.get("namespace"):
            nominated = by_name[match.group(1)]
        else:
            taken.add(match.group(1))  # launched for another pod
    if nominated is not None:
        return nominated
    try:
        asks = pod_requests(pod, ASKED)
    except QuantityError:
        return None  # no NodeClaim can be known to cover what cannot be read
    for claim in sorted(claims, key=lambda c: str((c.get("metadata") or {}).get("creationTimestamp") or "")):
        if nodeclaim_phase(claim) not in IN_FLIGHT or (
                (claim.get("metadata") or {}).get("name") in taken):
            continue
        requirements = claim_requirements(claim)
        if not any(incompatibility(requirements, term) is None for term in pod_requirement_terms(pod)):
            continue
        taints = (claim.get("spec") or {}).get("taints") or []
        if untolerated_taint({"spec": {"template": {"spec": {"taints": taints}}}}, pod) is not None:
            continue
        requests = ((claim.get("spec") or {}).get("resources") or {}).get("requests") or {}
        capacity = (claim.get("status") or {}).get("capacity") or {}
        offered = capacity.get(GPU_RESOURCE, requests.get(GPU_RESOURCE, 0))
        try:
            if parse_quantity(offered) < asks[GPU_RESOURCE]:
                continue
        except QuantityError:
            continue
        return claim
    return None


# ---------------------------------------------------------------------------------------------------
# The verdicts

@dataclass(frozen=True)
class PoolVerdict:
    nodepool: str
    weight: int
    reason: str  # "" (can provision), requirements, taint, limit, budget
    text: str
    figures: tuple[str, Decimal, Decimal] | None = None  # limit: (resource, provisioned, limit)

    @property
    def can_provision(self) -> bool:
        return not self.reason


@dataclass(frozen=True)
class Explanation:
    namespace: str
    name: str
    gpus: Decimal
    verdicts: tuple[PoolVerdict, ...]
    nodeclaim: str = ""
    nodeclaim_phase: str = ""
    nodeclaim_pool: str = ""
    problem: str = ""  # why the pod cannot be judged at all (a quantity that is none)

    @property
    def candidates(self) -> list[str]:
        return [v.nodepool for v in self.verdicts if v.can_provision]

    @property
    def summary(self) -> str:
        if self.problem:
            return self.problem
        if self.nodeclaim:
            return (f"NodeClaim {self.nodeclaim} ({self.nodeclaim_phase}) of NodePool {self.nodeclaim_pool} "
                    f"is being launched for it.")
        if self.candidates:
            return f"Karpenter can provision a node for it from {', '.join(self.candidates)}."
        if not self.verdicts:
            return "The cluster has no Karpenter NodePool."
        return "No NodePool can provision a node for it."

    def as_dict(self) -> dict[str, Any]:
        return {
            "namespace": self.namespace, "name": self.name, "gpus": str(self.gpus), "summary": self.summary,
            "can_provision": self.candidates,
            "nodeclaim": ({"name": self.nodeclaim, "phase": self.nodeclaim_phase, "nodepool": self.nodeclaim_pool}
                          if self.nodeclaim else None),
            "nodepools": [
                {"name": v.nodepool, "weight": v.weight, "can_provision": v.can_provision, "reason": v.reason or None,
                 "explanation": v.text,
                 **({"limit": {"resource": v.figures[0], "provisioned": _n(v.figures[1]), "limit": _n(v.figures[2])}}
                    if v.figures else {})}
                for v in self.verdicts
            ],
        }


def _pool_nodes(nodepool: Mapping[str, Any]) -> int:
    status = nodepool.get("status") or {}
    for value in (status.get("nodes"), (status.get("resources") or {}).get("nodes")):
        number = _int(value)
        if number is not None:
            return number
    return 0


def judge(nodepool: Mapping[str, Any], pod: Mapping[str, Any], *, now: dt.datetime | None = None) -> PoolVerdict:
    """Whether the NodePool can provision a node for the pod, else the first reason it cannot. Raises
    QuantityError when the pod's requests cannot be read (`explain` says so instead)."""
    now = now or dt.datetime.now(dt.UTC)
    name = str((nodepool.get("metadata") or {}).get("name") or "")
    weight = _int((nodepool.get("spec") or {}).get("weight")) or 0
    requirements = nodepool_requirements(nodepool)
    problems = [incompatibility(requirements, term) for term in pod_requirement_terms(pod)]
    if all(problems):
        return PoolVerdict(name, weight, "requirements", f"Its requirements exclude the pod: {problems[0]}.")
    asks = pod_requests(pod, ASKED)
    gpu_count = requirements.get(GPU_COUNT_LABEL)
    most = gpu_count.max_int() if gpu_count is not None else None
    if most is not None and asks[GPU_RESOURCE] > most:
        return PoolVerdict(name, weight, "requirements",
                           f"Its requirements exclude the pod: its instances have at most {most} {noun(most, 'GPU')} "
                           f"({gpu_count.text}); the pod asks {_n(asks[GPU_RESOURCE])} on one node.")
    taint = untolerated_taint(nodepool, pod)
    if taint is not None:
        return PoolVerdict(name, weight, "taint", f"The pod does not tolerate its taint {taint_text(taint)}.")
    reached = limit_reached(nodepool, asks)
    if reached is not None:
        resource, current, limit = reached
        figures = f"{resource} {_fmt(current, resource)} of {_fmt(limit, resource)}"
        need = "one more node" if resource == "nodes" else f"{_fmt(asks.get(resource, Decimal(0)), resource)} more"
        nodes = _pool_nodes(nodepool)
        disruption = (nodepool.get("spec") or {}).get("disruption") or {}
        allowed, budget = allowed_disruptions(nodepool, nodes, now)
        if disruption.get("consolidateAfter") == "Never":
            return PoolVerdict(name, weight, "budget",
                               f"Its limit is reached ({figures}; the pod needs {need}) and consolidation is off "
                               f"(consolidateAfter: Never), so Karpenter will not make room.", reached)
        if nodes and allowed == 0 and budget is not None:
            when = f" (schedule {budget.get('schedule')} for {budget.get('duration')})" if budget.get("schedule") else ""
            return PoolVerdict(name, weight, "budget",
                               f"Its limit is reached ({figures}; the pod needs {need}) and its disruption budget "
                               f"nodes: {budget.get('nodes')}{when} lets no node be consolidated now to make room.",
                               reached)
        return PoolVerdict(name, weight, "limit", f"Its limit is reached: {figures} provisioned; the pod needs {need}.",
                           reached)
    return PoolVerdict(name, weight, "", "Can provision a node for it.")


def explain(pod: Mapping[str, Any], nodepools: Iterable[Mapping[str, Any]], nodeclaims: Iterable[Mapping[str, Any]] = (),
            events: Iterable[Mapping[str, Any]] = (), *, now: dt.datetime | None = None) -> Explanation:
    """For a pending pod: every NodePool's verdict (Karpenter's order) and the NodeClaim launched for it."""
    pools = [p for p in nodepools if isinstance(p, Mapping) and not (p.get("metadata") or {}).get("deletionTimestamp")]
    pools.sort(key=lambda p: (-(_int((p.get("spec") or {}).get("weight")) or 0), str((p.get("metadata") or {}).get("name"))))
    md = pod.get("metadata") or {}
    try:
        gpus = pod_requests(pod, ASKED)[GPU_RESOURCE]
    except QuantityError as exc:
        return Explanation(namespace=str(md.get("namespace") or ""), name=str(md.get("name") or ""), gpus=Decimal(0),
                           verdicts=(), problem=f"Its requests cannot be read, so no NodePool can be judged: {exc}.")
    verdicts = tuple(judge(p, pod, now=now) for p in pools)
    claim = launching_for(pod, nodeclaims, events)
    claim_md = (claim or {}).get("metadata") or {}
    return Explanation(
        namespace=str(md.get("namespace") or ""), name=str(md.get("name") or ""), gpus=gpus,
        verdicts=verdicts, nodeclaim=str(claim_md.get("name") or ""),
        nodeclaim_phase=nodeclaim_phase(claim) if claim else "",
        nodeclaim_pool=str((claim_md.get("labels") or {}).get(NODEPOOL_LABEL) or ""),
    )


def is_pending(pod: Mapping[str, Any]) -> bool:
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    return not spec.get("nodeName") and (status.get("phase") or "Pending") == "Pending" and not (
        pod.get("metadata") or {}).get("deletionTimestamp")
