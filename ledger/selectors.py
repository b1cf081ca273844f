"""Reads of the ledger, each taking the user: hourly rows, their CSV, rates, and monthly statements.

A statement adds up a month of the ledger's daily rows (`LedgerDay`: closings and corrections, which are
the exact sums of the hourly rows). Its lines are priced day by day at the rate of each day (a change of
rate applies from its date only): cost = Σ (unit-seconds × price per unit-hour + core-seconds × price per
core-hour + GiB-seconds × price per GiB-hour) / 3600 — a line is one unit (whole GPUs, slices of a MIG
profile, replicas of a time-sliced GPU, GPU-equivalents of fractions), its price per unit-hour
`compute.unit_price` (a profile's own rate, else the model's × the unit's share), exact until each line is rounded once, to hundredths
of an hour and of the currency. Every total is the sum of the lines as shown (rounded), so that a
statement adds up on paper — but GPU utilization, an average: a line's and the totals' are Σ busy GPU-seconds /
Σ measured GPU-seconds, the utilization of their GPU-time weighted by GPU-hours (of the GPU-time Prometheus
measured); the exact integrals (seconds) are in the API beside the hours.

Idle GPU-hours and idle cost are measured or not: a line none of whose GPU-time Prometheus said the idle share
of (`idle_measured_gpu_seconds`) has None ("not measured", an empty CSV cell, null in the API), not 0; a
total is the sum of the measured lines, None when none is.

A statement has a number and an issue time (`statement_issue`): GPU-<month>-C<cluster>[-D<department>]-R<revision>
once its month is closed, issued when the month's last hour closed and revised (a revision more, issued then)
each time a later correction changed its figures (`services._statements_revise`); a month not closed yet
gives a provisional statement (`-PROV`), its figures as of when it is read.
"""
from __future__ import annotations

import calendar
import dataclasses
import datetime
from decimal import ROUND_HALF_UP, Decimal, localcontext
from itertools import islice
from typing import Any, AsyncIterator, Iterator

from asgiref.sync import sync_to_async
from django.db import connection
from django.db.models import Sum, TextField
from django.db.models.expressions import RawSQL
from django.utils import timezone

from common.csv import escape_cell
from common.parsing import InputError, parse_month
from kube import gpu as kube_gpu
from ledger import compute
from ledger.models import ClosedHour, Kind, LedgerDay, LedgerEntry, LedgerState, Rate, StatementRevision
from projects import prometheus as prom
from nodepools.models import Cluster, Node, NodePool
from projects.models import Department, Project, owner_labels

HUNDREDTH = Decimal("0.01")
TEN_THOUSANDTH = Decimal("0.0001")
GIB = Decimal(1073741824)
AMOUNTS = LedgerDay.AMOUNTS


def hours(seconds: Decimal | int | None, step: Decimal = HUNDREDTH) -> Decimal:
    """Seconds as hours, rounded half away from zero (as PostgreSQL's round(), which the CSV uses) to `step`."""
    if not seconds:
        return Decimal(0).quantize(step)
    # (28 significant digits hold any ledger amount's hours; the quotient of a sum that does not end is
    # never a tie, so rounding it twice is rounding it once.)
    return (Decimal(seconds) / 3600).quantize(step, rounding=ROUND_HALF_UP)


def gib_hours(byte_seconds: Decimal | int | None, step: Decimal = HUNDREDTH) -> Decimal:
    if not byte_seconds:
        return Decimal(0).quantize(step)
    with localcontext(prec=60):
        return (Decimal(byte_seconds) / GIB / 3600).quantize(step, rounding=ROUND_HALF_UP)


def money(value: Decimal) -> Decimal:
    return value.quantize(HUNDREDTH, rounding=ROUND_HALF_UP)


# ---------------------------------------------------------------------------------------------------
# Months

@dataclasses.dataclass(frozen=True)
class Month:
    year: int
    month: int

    @classmethod
    def parse(cls, text: str | None, *, today: datetime.date | None = None) -> "Month":
        """"2026-11" (YYYY-MM); empty: the current month (UTC). Raises ValueError naming the rule."""
        if not text:
            today = today or timezone.now().astimezone(datetime.timezone.utc).date()
            return cls(today.year, today.month)
        try:
            year, month = parse_month(text, field="month", first_year=2000)
        except InputError as exc:
            raise ValueError(f"month: {exc.message}") from None
        return cls(year, month)

    @property
    def first(self) -> datetime.date:
        return datetime.date(self.year, self.month, 1)

    @property
    def last(self) -> datetime.date:
        return datetime.date(self.year, self.month, calendar.monthrange(self.year, self.month)[1])

    @classmethod
    def of(cls, moment: datetime.datetime) -> "Month":
        """The month (UTC) of a moment."""
        day = moment.astimezone(datetime.timezone.utc).date()
        return cls(day.year, day.month)

    @property
    def start(self) -> datetime.datetime:
        """Its first moment (UTC)."""
        return datetime.datetime.combine(self.first, datetime.time(), tzinfo=datetime.timezone.utc)

    @property
    def end(self) -> datetime.datetime:
        """The first moment after it (UTC): the month is closed once the ledger is closed until then."""
        return self.next().start

    @property
    def days(self) -> list[datetime.date]:
        return [self.first + datetime.timedelta(days=i) for i in range(self.last.day)]

    def __str__(self) -> str:
        return f"{self.year:04d}-{self.month:02d}"

    @property
    def title(self) -> str:
        return f"{calendar.month_name[self.month]} {self.year}"

    def previous(self) -> "Month":
        return Month(self.year - 1, 12) if self.month == 1 else Month(self.year, self.month - 1)

    def next(self) -> "Month":
        return Month(self.year + 1, 1) if self.month == 12 else Month(self.year, self.month + 1)


# ---------------------------------------------------------------------------------------------------
# Rates

class RateBook:
    """Which rate holds for a (pool, GPU model[, MIG profile]) on a day: the pool's own latest rate from
    before or on that day, else the model's latest for every pool; None when none holds yet."""

    def __init__(self, rates: list[Rate]) -> None:
        self.by_model: dict[tuple[str, str], list[Rate]] = {}
        for rate in sorted(rates, key=lambda r: r.valid_from):
            self.by_model.setdefault((rate.gpu_model, rate.mig_profile), []).append(rate)
        # One currency for all rates (Rate.clean), so that costs add up.
        self.currency = next((r.currency for model_rates in self.by_model.values() for r in model_rates), "")
        self._cache: dict[tuple, Rate | None] = {}

    def price(self, pool_id: int | None, model: str, unit: str, day: datetime.date
              ) -> tuple[Rate | None, Decimal | None, bool]:
        """(the rate that prices a unit's GPUs — the profile's own, else the model's —, its price per
        unit-hour, whether that price is derived from the model's)."""
        base = self.at(pool_id, model, day)
        own = self.at(pool_id, model, day, unit) if kube_gpu.parse_mig_profile(unit) else None
        price, derived = compute.unit_price(unit, model, base.gpu_hour if base else None,
                                            own.gpu_hour if own else None)
        return (own or base), price, derived

    def at(self, pool_id: int | None, model: str, day: datetime.date, profile: str = "") -> Rate | None:
        key = (pool_id, model, day, profile)
        if key not in self._cache:
            found = None
            for rate in self.by_model.get((model, profile), ()):
                if rate.valid_from > day:
                    break
                if rate.pool_id == pool_id or (rate.pool_id is None and (found is None or found.pool_id is None)):
                    found = rate
            self._cache[key] = found
        return self._cache[key]


def rate_book() -> RateBook:
    return RateBook(list(Rate.objects.all()))


def rate_list(*, user: Any):
    return Rate.objects.restrict(user, "view").select_related("pool", "pool__cluster")


def currency_in_use() -> str:
    """The currency of the rates (one for all, Rate.clean), "" before the first rate."""
    return Rate.objects.order_by("-valid_from", "-pk").values_list("currency", flat=True).first() or ""


def gpu_models(*, user: Any) -> list[str]:
    """GPU models the user's visible pools have nodes of, and those rates name (for the rate form)."""
    models = set(Node.objects.restrict(user, "view").exclude(gpu_product="").values_list("gpu_product", flat=True))
    models |= set(Rate.objects.restrict(user, "view").values_list("gpu_model", flat=True))
    return sorted(models)


# ---------------------------------------------------------------------------------------------------
# Statements

@dataclasses.dataclass
class Line:
    """One line of a statement: its owner (department, project, pool, GPU model and unit as the statement
    groups), the exact sums, then the shown figures (rounded once). A department's line is of one unit:
    `unit` ("" whole GPUs, a MIG profile, `replica:<n>`, `fraction`), `quantity` in unit-hours, `rate` the
    price per unit-hour (None when the month's days had several, or none)."""

    key: tuple
    labels: dict[str, str]
    ids: dict[str, int | None]
    exact: dict[str, Decimal] = dataclasses.field(default_factory=lambda: {f: Decimal(0) for f in AMOUNTS})
    corrections_gpu_seconds: Decimal = Decimal(0)
    cost_exact: Decimal = Decimal(0)
    idle_cost_exact: Decimal = Decimal(0)
    unpriced_gpu_seconds: Decimal = Decimal(0)
    rates: set = dataclasses.field(default_factory=set)
    unit: str | None = None  # None: a line of several units (a department's line of a cluster statement)
    unit_prices: set = dataclasses.field(default_factory=set)
    rate_derived: bool = False
    # Shown:
    gpu_hours: Decimal = Decimal(0)
    over_quota_hours: Decimal = Decimal(0)
    non_preemptible_hours: Decimal = Decimal(0)
    idle_hours: Decimal | None = Decimal(0)  # None: not measured (no idle share of its GPU-time was reported)
    correction_hours: Decimal = Decimal(0)
    gpu_utilization: Decimal | None = None
    cpu_core_hours: Decimal = Decimal(0)
    memory_gib_hours: Decimal = Decimal(0)
    cost: Decimal = Decimal(0)
    idle_cost: Decimal | None = Decimal(0)  # None: idle not measured
    unpriced_hours: Decimal = Decimal(0)
    quantity: Decimal | None = None
    rate: Decimal | None = None

    SHOWN = ("gpu_hours", "over_quota_hours", "non_preemptible_hours", "idle_hours", "correction_hours",
             "cpu_core_hours", "memory_gib_hours", "cost", "idle_cost", "unpriced_hours")

    def add(self, row: dict[str, Any], day: datetime.date, book: RateBook) -> None:
        for f in AMOUNTS:
            self.exact[f] += row[f] or 0
        if row["kind"] == Kind.CORRECTION:
            self.corrections_gpu_seconds += row["gpu_seconds"] or 0
        unit = row.get("gpu_unit") or ""
        rate, price, derived = book.price(row["pool_id"], row["gpu_model"], unit, day)
        if rate is None or price is None:
            self.unpriced_gpu_seconds += row["gpu_seconds"] or 0
            return
        self.rates.add(rate.pk)
        self.unit_prices.add(price)
        self.rate_derived = self.rate_derived or derived
        base = book.at(row["pool_id"], row["gpu_model"], day) if rate.mig_profile else rate
        cpu_price = rate.cpu_core_hour if rate.cpu_core_hour is not None else (base.cpu_core_hour if base else None)
        memory_price = (rate.memory_gib_hour if rate.memory_gib_hour is not None
                        else (base.memory_gib_hour if base else None))
        gpu_seconds = row["gpu_seconds"] or 0
        with localcontext(prec=60):
            gpu_cost = _unit_seconds(row) * price
            cost = gpu_cost
            if cpu_price is not None:
                cost += (row["cpu_core_seconds"] or 0) * cpu_price
            if memory_price is not None:
                cost += Decimal(row["memory_byte_seconds"] or 0) / GIB * memory_price
            self.cost_exact += cost / 3600
            if gpu_seconds:  # idle GPU-time costs what the line's GPU-time costs, pro rata
                self.idle_cost_exact += gpu_cost * (row["idle_gpu_seconds"] or 0) / gpu_seconds / 3600

    def finish(self) -> "Line":
        e = self.exact
        self.gpu_hours = hours(e["gpu_seconds"])
        self.over_quota_hours = hours(e["over_quota_gpu_seconds"])
        self.non_preemptible_hours = hours(e["non_preemptible_gpu_seconds"])
        self.idle_hours = hours(e["idle_gpu_seconds"]) if self.idle_measured else None
        self.correction_hours = hours(self.corrections_gpu_seconds)
        self.cpu_core_hours = hours(e["cpu_core_seconds"])
        self.memory_gib_hours = gib_hours(e["memory_byte_seconds"])
        self.cost = money(self.cost_exact)
        self.idle_cost = money(self.idle_cost_exact) if self.idle_measured else None
        self.unpriced_hours = hours(self.unpriced_gpu_seconds)
        if self.unit is not None:
            self.quantity = hours(_unit_seconds({"gpu_unit": self.unit, **e}))
            self.rate = next(iter(self.unit_prices)).quantize(TEN_THOUSANDTH, ROUND_HALF_UP) \
                if len(self.unit_prices) == 1 else None
        if e["measured_gpu_seconds"]:
            self.gpu_utilization = (e["busy_gpu_seconds"] * 100 / e["measured_gpu_seconds"]).quantize(Decimal("0.1"))
        return self

    @property
    def idle_measured(self) -> bool:
        """Whether Prometheus said the idle share of any of the line's GPU-time."""
        return bool(self.exact["idle_measured_gpu_seconds"])

    @property
    def idle_measured_hours(self) -> Decimal:
        return hours(self.exact["idle_measured_gpu_seconds"])

    @property
    def idle_partly_measured(self) -> bool:
        """Idle measured of part of the line's GPU-time only (its idle hours are of that part)."""
        return self.idle_measured and self.exact["idle_measured_gpu_seconds"] < self.exact["gpu_seconds"]

    @property
    def unit_label(self) -> str:
        return "" if self.unit is None else kube_gpu.unit_label(self.unit)

    @property
    def quantity_label(self) -> str:
        """How the quantity is counted: GPU-hours, slice-hours, replica-hours, GPU-equivalent-hours."""
        return unit_hours_label(self.unit)


def unit_hours_label(unit: str | None) -> str:
    if unit is None:
        return ""
    if unit == "":
        return "GPU-hours"
    if unit == kube_gpu.UNIT_FRACTION:
        return "GPU-equivalent-hours"
    if kube_gpu.unit_replicas(unit) is not None:
        return "replica-hours"
    return "slice-hours"


def _unit_seconds(row: dict[str, Any]) -> Decimal:
    """A row's GPU-time in its unit: slice- or replica-seconds; GPU-seconds for whole GPUs and fractions
    (rows of before units were kept have no unit-seconds of their own)."""
    unit = row.get("gpu_unit") or ""
    if unit in ("", kube_gpu.UNIT_FRACTION):
        return row["gpu_seconds"] or Decimal(0)
    return row["unit_seconds"] or Decimal(0)


@dataclasses.dataclass
class Statement:
    """A month of a department's (or a cluster's) ledger: lines, totals (Σ of the lines as shown), the
    trend per day and the currency of the costs."""

    title: str
    month: Month
    cluster: Cluster
    department: Department | None
    lines: list[Line]
    totals: dict[str, Decimal]
    days: list[dict[str, Any]]
    currency: str
    exact: dict[str, Decimal]
    closed_until: datetime.datetime | None = None
    number: str = ""
    revision: int | None = None  # None: provisional
    issued_at: datetime.datetime | None = None  # provisional: the time its figures were read
    provisional: bool = True
    idle_not_measured_reason: str = ""

    @property
    def unpriced(self) -> bool:
        return bool(self.totals.get("unpriced_hours"))

    @property
    def idle_measured(self) -> bool:
        return self.totals.get("idle_hours") is not None


def add_shown(a: Decimal | None, b: Decimal | None) -> Decimal | None:
    """The sum of two shown figures, None (not measured) counting for nothing; None when both are."""
    if a is None:
        return b
    return a if b is None else a + b


def statement_issue(cluster: Cluster, department: Department | None, month: Month,
                    closed_until: datetime.datetime | None, *, now: datetime.datetime | None = None
                    ) -> tuple[str, int | None, datetime.datetime, bool]:
    """(number, revision, issued at, provisional) of a month's statement of a cluster or department.

    Closed (the ledger closed the month's last hour): revision and issue time of its latest revision
    (`StatementRevision`); a department's revision 1 is the cluster's (the month's close). A month closed
    before revisions were recorded: revision 1, issued when its last hour closed (or, a month that ended
    before the ledger began, when the ledger began). Not closed: provisional, as of `now`."""
    base = f"GPU-{month}-C{cluster.pk}" + (f"-D{department.pk}" if department is not None else "")
    if closed_until is None or closed_until < month.end:
        return f"{base}-PROV", None, now or timezone.now(), True
    revisions = StatementRevision.objects.filter(cluster_id=cluster.pk, month=month.first).order_by("-revision")
    found = revisions.filter(department_id=department.pk if department is not None else None).first()
    if found is None and department is not None:
        found = revisions.filter(department_id=None, revision=1).first()
    if found is not None:
        return f"{base}-R{found.revision}", found.revision, found.issued_at, False
    issued = (ClosedHour.objects.filter(cluster_id=cluster.pk, hour__gte=month.start, hour__lt=month.end)
              .order_by("-closed_at").values_list("closed_at", flat=True).first()
              or LedgerState.objects.filter(cluster_id=cluster.pk).values_list("started", flat=True).first())
    return f"{base}-R1", 1, issued, False


def idle_not_measured_reason(cluster: Cluster) -> str:
    """Why a line's idle GPU-hours may be not measured."""
    if not prom.prometheus_url(cluster):
        return "no Prometheus configured for this cluster"
    return ("Prometheus reported no idle share of these GPUs when their hours closed (unreachable then, or no "
            "DCGM exporter on their nodes)")


def _totals(lines: list[Line]) -> dict[str, Decimal]:
    totals = {name: sum((getattr(line, name) for line in lines), Decimal(0)).quantize(HUNDREDTH)
              for name in Line.SHOWN if name not in ("idle_hours", "idle_cost")}
    for name in ("idle_hours", "idle_cost"):  # of the measured lines; None when none is
        measured = [getattr(line, name) for line in lines if getattr(line, name) is not None]
        totals[name] = sum(measured, Decimal(0)).quantize(HUNDREDTH) if measured else None
    exact = {f: sum((line.exact[f] for line in lines), Decimal(0)) for f in AMOUNTS}
    totals["gpu_utilization"] = ((exact["busy_gpu_seconds"] * 100 / exact["measured_gpu_seconds"]).quantize(Decimal("0.1"))
                                 if exact["measured_gpu_seconds"] else None)
    return totals


def _days(rows: list[dict[str, Any]], month: Month) -> list[dict[str, Any]]:
    """GPU-hours, over-quota and idle per day of the month (a point for every day, zero when none)."""
    sums = {day: {f: Decimal(0) for f in ("gpu_seconds", "over_quota_gpu_seconds", "idle_gpu_seconds")}
            for day in month.days}
    for row in rows:
        for f in sums[row["day"]]:
            sums[row["day"]][f] += row[f] or 0
    return [{"day": day, "gpu_hours": hours(s["gpu_seconds"]), "over_quota_hours": hours(s["over_quota_gpu_seconds"]),
             "idle_hours": hours(s["idle_gpu_seconds"])} for day, s in sums.items()]


def _day_rows(queryset, month: Month, group: tuple[str, ...]) -> list[dict[str, Any]]:
    """The month's daily rows summed per (group…, pool, GPU model, unit, day, kind) — the pricing's grain."""
    fields = (*group, "pool_id", "gpu_model", "gpu_unit", "day", "kind")
    return list(queryset.filter(day__gte=month.first, day__lte=month.last).order_by().values(*fields)
                .annotate(**{f: Sum(f) for f in AMOUNTS}))


def _closed_until(cluster: Cluster) -> datetime.datetime | None:
    return LedgerState.objects.filter(cluster_id=cluster.pk).values_list("closed_until", flat=True).first()


def _sort_key(line: Line):
    return (*(line.labels.get(k, "") for k in ("department", "project", "pool", "gpu_model")), line.unit or "")


def _fine_lines(rows: list[dict[str, Any]], book: RateBook) -> list[Line]:
    """Lines per (department, project, pool, GPU model, unit), priced day by day and rounded once: the grain of
    every statement (a cluster's department line is the sum of these, so it equals the department's total)."""
    projects = owner_labels(Project.objects.filter(pk__in={r["project_id"] for r in rows}))
    pools = dict(NodePool.objects.filter(pk__in={r["pool_id"] for r in rows}).values_list("pk", "name"))
    departments = owner_labels(Department.objects.filter(pk__in={r["department_id"] for r in rows}))
    lines: dict[tuple, Line] = {}
    for row in rows:
        key = (row["department_id"], row["project_id"], row["pool_id"], row["gpu_model"], row["gpu_unit"])
        line = lines.get(key)
        if line is None:
            line = lines[key] = Line(
                key=key, unit=row["gpu_unit"], ids={"department": row["department_id"], "project": row["project_id"], "pool": row["pool_id"]},
                labels={"department": _name(departments, row["department_id"]) if row["department_id"]
                        else "(pods of no project)",
                        "project": _name(projects, row["project_id"]), "pool": _name(pools, row["pool_id"]),
                        "gpu_model": row["gpu_model"] or "(no GPU)"})
        line.add(row, row["day"], book)
    return [line.finish() for line in lines.values()]


def _statement(title: str, month: Month, cluster: Cluster, department, lines: list[Line], rows, book) -> Statement:
    exact = {f: sum((line.exact[f] for line in lines), Decimal(0)) for f in AMOUNTS}
    closed_until = _closed_until(cluster)
    number, revision, issued_at, provisional = statement_issue(cluster, department, month, closed_until)
    return Statement(title=title, month=month, cluster=cluster, department=department, lines=lines,
                     totals=_totals(lines), days=_days(rows, month), currency=book.currency, exact=exact,
                     closed_until=closed_until, number=number, revision=revision, issued_at=issued_at,
                     provisional=provisional, idle_not_measured_reason=idle_not_measured_reason(cluster))


def department_statement(*, user: Any, department: Department, month: Month) -> Statement:
    """Projects × pools × GPU models of a department for a month (only the rows the user may read)."""
    rows = _day_rows(LedgerDay.objects.restrict(user, "view").filter(department=department), month,
                     ("department_id", "project_id"))
    book = rate_book()
    lines = sorted(_fine_lines(rows, book), key=_sort_key)
    return _statement(f"Department {department.label_with_name}, {month.title}", month, department.cluster, department, lines,
                      rows, book)


def cluster_statement(*, user: Any, cluster: Cluster, month: Month) -> Statement:
    """Departments of a cluster for a month, ranked by GPU-hours (pods of no project in a line of their
    own); each department's line is the sum of its statement's lines."""
    rows = _day_rows(LedgerDay.objects.restrict(user, "view").filter(cluster_id=cluster.pk), month,
                     ("department_id", "project_id"))
    book = rate_book()
    by_department: dict[Any, Line] = {}
    for fine in _fine_lines(rows, book):
        key = fine.ids["department"]
        line = by_department.get(key)
        if line is None:
            line = by_department[key] = Line(key=(key,), ids={"department": key},
                                             labels={"department": fine.labels["department"]},
                                             idle_hours=None, idle_cost=None)
        for f in AMOUNTS:
            line.exact[f] += fine.exact[f]
        for name in Line.SHOWN:
            setattr(line, name, add_shown(getattr(line, name), getattr(fine, name)))
    for line in by_department.values():
        e = line.exact
        if e["measured_gpu_seconds"]:
            line.gpu_utilization = (e["busy_gpu_seconds"] * 100 / e["measured_gpu_seconds"]).quantize(Decimal("0.1"))
    lines = sorted(by_department.values(),
                   key=lambda line: (-line.gpu_hours, line.ids["department"] is None, line.labels["department"]))
    return _statement(f"Cluster {cluster.name}, {month.title}", month, cluster, None, lines, rows, book)


def _name(names: dict[int, str], pk: int | None) -> str:
    if pk is None:
        return "—"
    return names.get(pk) or f"#{pk} (deleted)"


DEPARTMENT_CSV = ("Project", "Node pool", "GPU model", "GPU-hours", "Over-quota GPU-hours", "Non-preemptible GPU-hours",
                  "Idle GPU-hours (empty: not measured)", "Corrections (GPU-hours)",
                  "GPU utilization (%, average weighted by GPU-hours)", "CPU-core-hours",
                  "Memory-GiB-hours", "Cost", "Idle cost (empty: not measured)", "Currency", "GPU-hours without a rate")
# Every row says which statement it is of: its number, whether it is provisional, when it was issued.
STATEMENT_CSV = ("Statement number", "Status", "Issued (UTC)")
CLUSTER_CSV = ("Rank", "Department",) + DEPARTMENT_CSV[3:] + STATEMENT_CSV
# A department's lines are each of one unit: what it is, how many unit-hours, the price per unit-hour.
DEPARTMENT_CSV = DEPARTMENT_CSV + ("Unit", "Quantity", "Quantity counted in", "Rate (per unit-hour)") + STATEMENT_CSV


def _utc(moment: datetime.datetime | None) -> str:
    return "" if moment is None else moment.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def statement_csv_rows(statement: Statement) -> Iterator[list]:
    """The lines as on the page, then the totals line (the sum of the lines; utilization their average
    weighted by GPU-hours); each row ends with the statement's number, status and issue time."""
    cluster_wide = statement.department is None
    issue = [statement.number, "provisional" if statement.provisional else f"revision {statement.revision}",
             _utc(statement.issued_at)]
    figures = ("gpu_hours", "over_quota_hours", "non_preemptible_hours", "idle_hours", "correction_hours",
               "gpu_utilization", "cpu_core_hours", "memory_gib_hours", "cost", "idle_cost")
    for rank, line in enumerate(statement.lines, start=1):
        head = [rank, line.labels["department"]] if cluster_wide else [
            line.labels["project"], line.labels["pool"], line.labels["gpu_model"]]
        unit = [] if cluster_wide else [line.unit_label, line.quantity, line.quantity_label,
                                        "" if line.rate is None else line.rate]
        yield head + [getattr(line, f) for f in figures] + [statement.currency, line.unpriced_hours] + unit + issue
    t = statement.totals
    head = ["", "Total"] if cluster_wide else ["Total", "", ""]
    yield (head + [t[f] for f in figures] + [statement.currency, t["unpriced_hours"]]
           + ([] if cluster_wide else [""] * 4) + issue)


# ---------------------------------------------------------------------------------------------------
# Hourly rows

def entry_list(*, user: Any):
    return LedgerEntry.objects.restrict(user, "view").select_related("pool", "department", "project")


LEDGER_CSV = ("Hour (UTC)", "Kind", "Recorded (UTC)", "Cluster", "Node pool", "GPU model", "Department", "Project",
              "GPU-hours", "Over-quota GPU-hours", "Non-preemptible GPU-hours", "Idle GPU-hours",
              "GPU utilization (%)", "CPU-core-hours", "Memory-GiB-hours", "GPU-seconds", "Unit", "Unit-hours")


async def ledger_csv_lines(entries) -> AsyncIterator[str]:
    """The hourly rows as CSV text (header first), oldest first, read in chunks from a server-side cursor
    and written a chunk at a time (an async generator: under ASGI the response streams it as it comes,
    memory flat; a year of a large cluster is millions of rows). Names come from dicts read once. On
    PostgreSQL the database writes the numbers and times as text (exact numeric arithmetic, rounded half
    away from zero like `hours()`); elsewhere they are formatted here. Text cells are escaped against
    formula injection like every CSV of the console; a negative number (a correction) starts with "-"
    and is escaped too."""
    format_row = await sync_to_async(_ledger_csv_formatter)()
    yield ",".join(_quoted(escape_cell(h)) for h in LEDGER_CSV) + "\r\n"
    # (QuerySet.aiterator() runs a values_list() query in the event loop's thread: the iterator is made and
    # read, a chunk at a time, in the thread the database connection lives in.)
    ordered = entries.order_by("hour", "pk")
    if connection.vendor == "postgresql":
        rows = ordered.annotate(**_pg_text_columns()).values_list(*_PG_FIELDS).iterator(chunk_size=CSV_CHUNK)
        format_row = _pg_formatter(format_row.names)
    else:
        rows = ordered.values_list(*_LEDGER_CSV_FIELDS).iterator(chunk_size=CSV_CHUNK)

    def chunk() -> str:
        return "".join(map(format_row, islice(rows, CSV_CHUNK)))

    while True:
        text = await sync_to_async(chunk)()
        if not text:
            return
        yield text


CSV_CHUNK = 5000
_PG_FIELDS = ("t_hour", "kind", "t_recorded", "cluster_id", "pool_id", "gpu_model", "department_id", "project_id",
              "t_gpu", "t_over", "t_nonpre", "t_idle", "t_util", "t_cpu", "t_memory", "t_seconds", "gpu_unit",
              "t_units")


def _pg_text_columns() -> dict:
    """The CSV's figures as PostgreSQL writes them (numeric, exact; round() is half away from zero)."""
    t = f'"{LedgerEntry._meta.db_table}"'

    def text(sql: str) -> RawSQL:
        return RawSQL(sql, [], output_field=TextField())

    def hours_of(column: str, divisor: str = "3600") -> RawSQL:
        return text(f"round({t}.{column} / {divisor}, 4)::text")

    stamp = "to_char({} AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"')"
    return {
        "t_hour": text(stamp.format(f"{t}.hour")), "t_recorded": text(stamp.format(f"{t}.recorded")),
        "t_gpu": hours_of("gpu_seconds"), "t_over": hours_of("over_quota_gpu_seconds"),
        "t_nonpre": hours_of("non_preemptible_gpu_seconds"), "t_idle": hours_of("idle_gpu_seconds"),
        "t_util": text(f"CASE WHEN {t}.measured_gpu_seconds <> 0 THEN round({t}.busy_gpu_seconds * 100 / "
                       f"{t}.measured_gpu_seconds, 1)::text ELSE '' END"),
        "t_cpu": hours_of("cpu_core_seconds"), "t_memory": hours_of("memory_byte_seconds", "1073741824 / 3600"),
        "t_seconds": text(f"{t}.gpu_seconds::text"),
        # A row's hours in its unit (whole GPUs and fractions: its GPU-hours).
        "t_units": text(f"round((CASE WHEN {t}.gpu_unit IN ('', 'fraction') THEN {t}.gpu_seconds "
                        f"ELSE {t}.unit_seconds END) / 3600, 4)::text"),
    }


def _pg_formatter(name):
    kinds = {k.value: k.label for k in Kind}

    def n(text: str) -> str:
        return "'" + text if text[:1] == "-" else text

    def line(row) -> str:
        (hour, kind, recorded, cluster, pool, gpu_model, department, project, gpu, over, nonpre, idle, util, cpu,
         memory, seconds, unit, units) = row
        return ",".join((hour, kinds[kind], recorded, name("cluster", cluster), name("pool", pool),
                         name("model", gpu_model), name("department", department), name("project", project),
                         n(gpu), n(over), n(nonpre), n(idle), n(util), n(cpu), n(memory), n(seconds),
                         name("unit", unit), n(units))) + "\r\n"

    return line


_LEDGER_CSV_FIELDS = ("hour", "kind", "recorded", "cluster_id", "pool_id", "gpu_model", "department_id", "project_id",
                      "gpu_seconds", "over_quota_gpu_seconds", "non_preemptible_gpu_seconds", "idle_gpu_seconds",
                      "measured_gpu_seconds", "busy_gpu_seconds", "cpu_core_seconds", "memory_byte_seconds",
                      "gpu_unit", "unit_seconds")


def _quoted(value: str) -> str:
    return '"' + value.replace('"', '""') + '"' if any(c in value for c in ',"\r\n') else value


def _ledger_csv_formatter():
    """row (the values of _LEDGER_CSV_FIELDS) -> its CSV line; names and labels looked up once."""
    names = {
        "cluster": dict(Cluster.objects.values_list("pk", "name")),
        "pool": dict(NodePool.objects.values_list("pk", "name")),
        "department": owner_labels(Department.objects.all()),
        "project": owner_labels(Project.objects.all()),
    }
    cells: dict[tuple, str] = {}  # (kind of name, id) -> its cell, escaped and quoted once
    kinds = {k.value: k.label for k in Kind}
    step = TEN_THOUSANDTH
    utc = datetime.timezone.utc
    times: dict[datetime.datetime, str] = {}
    tenth = Decimal("0.1")

    def name(kind: str, pk) -> str:
        key = (kind, pk)
        cell = cells.get(key)
        if cell is None:
            if kind == "model":
                cell = _quoted(escape_cell(pk))
            elif kind == "unit":
                cell = _quoted(escape_cell(kube_gpu.unit_label(pk or "")))
            else:
                cell = "" if pk is None else _quoted(escape_cell(names[kind].get(pk) or f"#{pk} (deleted)"))
            cells[key] = cell
        return cell

    def moment(value: datetime.datetime) -> str:
        text = times.get(value)
        if text is None:
            if len(times) > 100_000:
                times.clear()
            text = times[value] = value.astimezone(utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        return text

    def number(value: Decimal) -> str:
        out = format(value, "f")
        return "'" + out if out[0] == "-" else out

    def line(row) -> str:
        (hour, kind, recorded, cluster, pool, gpu_model, department, project, gpu, over, nonpre, idle, measured, busy,
         cpu, memory, unit, units) = row
        units = _unit_seconds({"gpu_unit": unit, "gpu_seconds": gpu, "unit_seconds": units})
        util = number((busy * 100 / measured).quantize(tenth)) if measured else ""
        return ",".join((
            moment(hour), kinds[kind], moment(recorded), name("cluster", cluster), name("pool", pool), name("model", gpu_model),
            name("department", department), name("project", project),
            number(hours(gpu, step)), number(hours(over, step)), number(hours(nonpre, step)), number(hours(idle, step)),
            util, number(hours(cpu, step)), number(gib_hours(memory, step)), number(gpu),
            name("unit", unit), number(hours(units, step)),
        )) + "\r\n"

    line.names = name
    return line
