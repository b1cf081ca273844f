"""Every write of the ledger: closing hours, correcting them, retention, quota history and rates.

- `ledger_round(cluster, api_client)`: the sync leader's task (registered in LedgerConfig.ready, every
  LEDGER_EVERY seconds): closes each hour of the cluster whose end (plus LEDGER_CLOSE_DELAY) the pods'
  mirror has passed (`Cluster.pods_current_at`), oldest first — so it catches up after the sync was
  down —, then corrects closed hours that late events changed.
- `ledger_hour_close(cluster=, hour=)`: one hour (`compute.hour_rows` over the pods' lifetimes).
- `ledger_corrections(cluster=)`: lifetimes changed since the hours they fall in were closed (a late
  finish or deletion, a pod found at a list after the sync was down): those hours are computed again and
  the difference is written as correction rows of their own.
- `ledger_retention_apply()`: the snapshot job's part: hourly rows past LEDGER_HOURLY_RETENTION_DAYS and
  pods' lifetimes past LEDGER_CORRECTION_DAYS go, in batches (days stay).
- `deserved_history_record(quota=)`: a project's deserved GPUs, as they change.
- `rate_create / rate_update / rate_delete`: system administrators only, audited.
"""
from __future__ import annotations

import bisect
import datetime
import logging
import time
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone

from access.rules import is_system_admin, user_can
from audit.models import AuditEvent
from audit.services import audit_record, snapshot
from common.exceptions import ConcurrentUpdate
from ledger import compute
from ledger.models import (ClosedHour, DeservedHistory, Kind, LedgerDay, LedgerEntry, LedgerState, Rate,
                           StatementRevision)
from ledger.selectors import Month
from ledger.utilization import hour_utilization
from nodepools.kube import is_preemptible
from nodepools.models import Cluster, Node, PodLifetime
from nodepools.services import pod_lifetimes_expire
from projects.models import ProjectNamespace, Quota

logger = logging.getLogger("ledger")
HOUR = datetime.timedelta(hours=1)
UTC = datetime.timezone.utc
EPOCH = datetime.datetime(1970, 1, 1, tzinfo=UTC)


def _setting(name: str, default: float) -> float:
    return float(getattr(settings, name, default))


def close_delay() -> datetime.timedelta:
    return datetime.timedelta(seconds=_setting("LEDGER_CLOSE_DELAY", 120))


def correction_window() -> datetime.timedelta:
    return datetime.timedelta(days=_setting("LEDGER_CORRECTION_DAYS", 14))


def hour_floor(moment: datetime.datetime) -> datetime.datetime:
    return moment.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


def _epoch(moment: datetime.datetime) -> int:
    return int(moment.timestamp())


# ---------------------------------------------------------------------------------------------------
# What an hour is computed from

def _owners(cluster_id: int) -> dict[str, tuple[int, int]]:
    """namespace -> (project id, department id): who owns a pod's time (the namespaces as they are now)."""
    return {name: (project, department) for name, project, department in ProjectNamespace.objects.filter(
        cluster_id=cluster_id).values_list("name", "project_id", "project__department_id")}


def _intervals(cluster_id: int, start: datetime.datetime, end: datetime.datetime,
               owners: dict[str, tuple[int, int]]) -> list[compute.Interval]:
    """The lifetimes of the cluster's pods that overlap [start, end)."""
    rows = (PodLifetime.objects.filter(cluster_id=cluster_id, started__lt=end)
            .filter(Q(ended__isnull=True) | Q(ended__gt=start)).order_by()
            .values_list("uid", "namespace", "name", "pool_id", "gpu_model", "gpus", "cpu_millis", "memory_bytes",
                         "priority", "started", "ended", "gpu_unit", "gpu_units"))
    out = []
    nobody = (None, None)
    for (uid, namespace, name, pool, model, gpus, cpu, memory, priority, started, ended, unit,
         units) in rows.iterator(chunk_size=5000):
        out.append(compute.Interval(uid, namespace, name, pool, model, owners.get(namespace, nobody)[0], gpus, cpu,
                                    memory, is_preemptible(priority), _epoch(started),
                                    None if ended is None else _epoch(ended), unit, units if unit else None))
    return out


def _deserved(cluster_id: int) -> compute.Deserved:
    """Each project's deserved GPUs per pool of the cluster over time (DeservedHistory), else as now."""
    current = {(pool, project): deserved for pool, project, deserved in Quota.objects.filter(
        pool__cluster_id=cluster_id, project__isnull=False).values_list("pool_id", "project_id", "gpu_deserved")}
    steps: dict[tuple, list] = {}
    for pool, project, deserved, since in DeservedHistory.objects.filter(pool_id__in={p for p, _ in current}).values_list(
            "pool_id", "project_id", "gpu_deserved", "since"):
        steps.setdefault((pool, project), []).append((_epoch(since), deserved))
    return compute.Deserved(steps, default=lambda pool, project: current.get((pool, project), Decimal(0)))


def _compute(cluster: Cluster, hour: datetime.datetime, *, utilization=None):
    """(rows {(pool, model, project): Figures}, departments {project: department}, utilization reason)."""
    owners = _owners(cluster.pk)
    intervals = _intervals(cluster.pk, hour, hour + HOUR, owners)
    reason = ""
    if utilization is None:
        utilization, reason = hour_utilization(cluster, hour)
    rows = compute.hour_rows(_epoch(hour), intervals, _deserved(cluster.pk), utilization)
    departments = {project: department for project, department in owners.values()}
    return rows, departments, reason


# ---------------------------------------------------------------------------------------------------
# Writing rows (hours and their days, in one transaction)

def _entry(cluster_id: int, hour: datetime.datetime, kind: int, recorded: datetime.datetime, key: tuple,
           department: int | None, figures: compute.Figures) -> LedgerEntry:
    pool, model, project = key[:3]
    return LedgerEntry(hour=hour, kind=kind, recorded=recorded, cluster_id=cluster_id, pool_id=pool, gpu_model=model,
                       gpu_unit=compute.key_unit(key), department_id=department, project_id=project,
                       **figures.values())


_ENTRY_COLUMNS = ("hour", "kind", "recorded", "cluster_id", "pool_id", "gpu_model", "gpu_unit", "department_id",
                  "project_id", *LedgerEntry.AMOUNTS)


def _insert_entries(entries: list[LedgerEntry]) -> None:
    """INSERT the hourly rows in batches of plain parameters (bulk_create prepares every field of every
    row in Python: an hour of a large cluster, or the demo's month, is thousands of rows)."""
    if not entries:
        return
    q = connection.ops.quote_name
    adapt = connection.ops.adapt_datetimefield_value if connection.vendor != "postgresql" else (lambda v: v)
    sql = (f"INSERT INTO {q(LedgerEntry._meta.db_table)} ({', '.join(q(c) for c in _ENTRY_COLUMNS)}) "
           f"VALUES ({', '.join(['%s'] * len(_ENTRY_COLUMNS))})")
    rows = [(adapt(e.hour), e.kind, adapt(e.recorded), e.cluster_id, e.pool_id, e.gpu_model, e.gpu_unit, e.department_id,
             e.project_id, *(getattr(e, f) for f in LedgerEntry.AMOUNTS)) for e in entries]
    with connection.cursor() as cursor:
        for i in range(0, len(rows), 2000):
            cursor.executemany(sql, rows[i:i + 2000])


def _add_to_days(entries: list[LedgerEntry]) -> None:
    """Add hourly rows to their days' rows (same kind), creating the rows a day does not have yet."""
    by_day: dict[tuple, dict[tuple, LedgerEntry]] = {}
    for e in entries:
        day = e.hour.astimezone(UTC).date()
        key = (e.pool_id, e.gpu_model, e.gpu_unit, e.department_id, e.project_id)
        by_day.setdefault((e.cluster_id, day, e.kind), {})
        found = by_day[(e.cluster_id, day, e.kind)].get(key)
        if found is None:
            by_day[(e.cluster_id, day, e.kind)][key] = LedgerEntry(**{f: getattr(e, f) for f in LedgerEntry.AMOUNTS})
        else:
            for f in LedgerEntry.AMOUNTS:
                setattr(found, f, getattr(found, f) + getattr(e, f))
    for (cluster_id, day, kind), sums in by_day.items():
        existing = {(d.pool_id, d.gpu_model, d.gpu_unit, d.department_id, d.project_id): d for d in LedgerDay.objects.filter(
            cluster_id=cluster_id, day=day, kind=kind)}
        changed, new = [], []
        for key, s in sums.items():
            row = existing.get(key)
            if row is None:
                pool, model, unit, department, project = key
                new.append(LedgerDay(day=day, kind=kind, cluster_id=cluster_id, pool_id=pool, gpu_model=model,
                                     gpu_unit=unit, department_id=department, project_id=project,
                                     **{f: getattr(s, f) for f in LedgerDay.AMOUNTS}))
            else:
                for f in LedgerDay.AMOUNTS:
                    setattr(row, f, getattr(row, f) + getattr(s, f))
                changed.append(row)
        LedgerDay.objects.bulk_create(new, batch_size=1000)
        if changed:
            LedgerDay.objects.bulk_update(changed, list(LedgerDay.AMOUNTS), batch_size=500)


def ledger_state(*, cluster: Cluster, now: datetime.datetime | None = None) -> LedgerState:
    """The cluster's ledger state; the ledger of a cluster starts at the hour it is first asked for."""
    now = now or timezone.now()
    start = hour_floor(now)
    state, _ = LedgerState.objects.get_or_create(cluster_id=cluster.pk, defaults={
        "started": start, "closed_until": start, "scanned_until": now})
    return state


def ledger_hour_close(*, cluster: Cluster, hour: datetime.datetime, now: datetime.datetime | None = None,
                      utilization=None) -> ClosedHour:
    """Close one hour of a cluster: its rows (closings) and its days'. Raises if it is closed already.
    The hour is computed (Prometheus read) first, outside the short transaction that writes it."""
    hour = hour_floor(hour)
    now = now or timezone.now()
    rows, departments, reason = _compute(cluster, hour, utilization=utilization)
    entries = [_entry(cluster.pk, hour, Kind.CLOSING, now, key, departments.get(key[2]), figures)
               for key, figures in sorted(rows.items(), key=lambda kv: tuple(str(k) for k in kv[0]))
               if not figures.is_zero()]
    with transaction.atomic():
        closed = ClosedHour.objects.create(cluster_id=cluster.pk, hour=hour, closed_at=now,
                                           pods=sum(f.pods for f in rows.values()))
        _insert_entries(entries)
        _add_to_days(entries)
        LedgerState.objects.filter(cluster_id=cluster.pk, closed_until__lt=hour + HOUR).update(
            closed_until=hour + HOUR)
        if (hour + HOUR).day == 1 and (hour + HOUR).hour == 0:  # the month's last hour: its statements are issued
            StatementRevision.objects.get_or_create(cluster_id=cluster.pk, department_id=None, month=Month.of(hour).first,
                                                    revision=1, defaults={"issued_at": now})
    if reason and cluster.prometheus_url:
        logger.warning("cluster %s: hour %s closed without GPU utilization: %s", cluster.name, hour, reason)
    return closed


def _stored(cluster_id: int, hour: datetime.datetime, groups: set[tuple]) -> dict[tuple, compute.Figures]:
    """Σ of every row (closings and corrections) of an hour, per (pool, model, project[, unit]) of these groups."""
    out: dict[tuple, compute.Figures] = {}
    for e in LedgerEntry.objects.filter(cluster_id=cluster_id, hour=hour):
        if (e.pool_id, e.project_id) not in groups:
            continue
        figures = out.setdefault(compute.row_key(e.pool_id, e.gpu_model, e.project_id, e.gpu_unit), compute.Figures())
        for f in compute.Figures.FIELDS:
            setattr(figures, f, getattr(figures, f) + getattr(e, f))
    return out


def _keep_measurements(new: compute.Figures, old: compute.Figures) -> None:
    """Prometheus could not be read again: keep the hour's idle share and utilization as first measured."""
    if not old.gpu_seconds:
        new.idle_gpu_seconds = new.idle_measured_gpu_seconds = new.measured_gpu_seconds = new.busy_gpu_seconds = Decimal(0)
        return
    ratio = new.gpu_seconds / old.gpu_seconds
    for f in ("idle_gpu_seconds", "idle_measured_gpu_seconds", "measured_gpu_seconds", "busy_gpu_seconds"):
        setattr(new, f, min(new.gpu_seconds, (getattr(old, f) * ratio).quantize(compute.MILLI)))


def ledger_hour_correct(*, cluster: Cluster, hour: datetime.datetime, groups: set[tuple],
                        now: datetime.datetime | None = None, utilization=None) -> list[LedgerEntry]:
    """Compute a closed hour again and write, for the (pool, project) groups named, what changed as
    correction rows (the difference to all rows stored for it). Returns the rows written."""
    now = now or timezone.now()
    rows, departments, reason = _compute(cluster, hour, utilization=utilization)
    with transaction.atomic():
        return _correct(cluster, hour, groups, now, rows, departments, reason)


def _correct(cluster, hour, groups, now, rows, departments, reason) -> list[LedgerEntry]:
    stored = _stored(cluster.pk, hour, groups)
    corrections = []
    for key in sorted(set(stored) | {k for k in rows if (k[0], k[2]) in groups}, key=lambda k: tuple(map(str, k))):
        new = rows.get(key) or compute.Figures()
        old = stored.get(key) or compute.Figures()
        if reason:
            _keep_measurements(new, old)
        delta = new.minus(old)
        if not delta.is_zero():
            corrections.append(_entry(cluster.pk, hour, Kind.CORRECTION, now, key, departments.get(key[2]), delta))
    if corrections:
        _insert_entries(corrections)
        _add_to_days(corrections)
        ClosedHour.objects.filter(cluster_id=cluster.pk, hour=hour).update(corrected_at=now)
        _statements_revise(cluster.pk, hour, {c.department_id for c in corrections}, now)
    return corrections


# ---------------------------------------------------------------------------------------------------
# Statements' revisions (selectors.statement_issue reads them)

def _statements_revise(cluster_id: int, hour: datetime.datetime, departments: set[int | None],
                       now: datetime.datetime) -> None:
    """Corrections of `hour` were written at `now`: if its month is closed (its statements issued), the
    cluster's statement and those of the departments corrected get a revision more (one per correction
    round: the hours a round corrects make one revision)."""
    month = Month.of(hour)
    closed_until = LedgerState.objects.filter(cluster_id=cluster_id).values_list("closed_until", flat=True).first()
    if closed_until is None or closed_until < month.end:
        return  # the month is open: its statements are provisional, their figures as of when they are read
    for department in {None} | departments:
        latest = (StatementRevision.objects.filter(cluster_id=cluster_id, department_id=department, month=month.first)
                  .order_by("-revision").values_list("revision", "issued_at").first())
        if latest is not None and latest[1] == now:
            continue
        StatementRevision.objects.create(cluster_id=cluster_id, department_id=department, month=month.first,
                                         revision=(latest[0] if latest else 1) + 1, issued_at=now)


def _affected(cluster_id: int, since: datetime.datetime, horizon: datetime.datetime,
              owners: dict[str, tuple[int, int]]) -> tuple[dict[datetime.datetime, set[tuple]], datetime.datetime | None]:
    """{closed hour: {(pool, project)}} that lifetimes changed after `since` may have changed, and the
    latest change seen. A lifetime unknown when the hour closed counts if it overlaps it; one known then
    (since changed: it ended, or what it holds changed) counts for the hours from its end on."""
    hours = list(ClosedHour.objects.filter(cluster_id=cluster_id, hour__gte=horizon).order_by("hour")
                 .values_list("hour", "closed_at"))
    affected: dict[datetime.datetime, set[tuple]] = {}
    latest = None
    if not hours:
        return affected, latest
    starts = [hour for hour, _ in hours]
    for namespace, pool, started, ended, recorded, changed in PodLifetime.objects.filter(
            cluster_id=cluster_id, changed__gt=since).values_list("namespace", "pool_id", "started", "ended",
                                                                  "recorded", "changed").iterator(chunk_size=5000):
        latest = changed if latest is None or changed > latest else latest
        group = (pool, owners.get(namespace, (None, None))[0])
        for hour, closed_at in hours[bisect.bisect_left(starts, hour_floor(started)):]:
            if closed_at >= changed or started >= hour + HOUR:
                continue
            if recorded > closed_at:  # unknown when the hour closed
                touches = ended is None or ended > hour
            else:  # known then: only its end (or what it holds) changed since
                touches = ended is None or hour + HOUR > ended
            if touches:
                affected.setdefault(hour, set()).add(group)
    return affected, latest


def ledger_corrections(*, cluster: Cluster, now: datetime.datetime | None = None,
                       budget: float | None = None) -> int:
    """Correct the closed hours (within LEDGER_CORRECTION_DAYS) that lifetimes changed since the last
    look may have changed; returns the correction rows written. Looks back a little before the last look
    (a batch written meanwhile commits later than it is stamped); a group that did not change gets no row."""
    now = now or timezone.now()
    state = ledger_state(cluster=cluster, now=now)
    since = state.scanned_until - datetime.timedelta(minutes=5)
    owners = _owners(cluster.pk)
    affected, latest = _affected(cluster.pk, since, hour_floor(now - correction_window()), owners)
    written = 0
    started = time.monotonic()
    for hour in sorted(affected):
        written += len(ledger_hour_correct(cluster=cluster, hour=hour, groups=affected[hour], now=now))
        if budget is not None and time.monotonic() - started > budget:
            return written  # the rest at the next round (scanned_until not moved)
    if latest is not None and latest > state.scanned_until:
        LedgerState.objects.filter(pk=state.pk).update(scanned_until=latest)
    return written


def hours_due(*, cluster: Cluster, now: datetime.datetime | None = None) -> list[datetime.datetime]:
    """The hours of the cluster that may be closed now, oldest first: ended (plus LEDGER_CLOSE_DELAY)
    before the moment up to which the sync's mirror of its pods is known complete."""
    now = now or timezone.now()
    state = ledger_state(cluster=cluster, now=now)
    current = Cluster.objects.filter(pk=cluster.pk).values_list("pods_current_at", flat=True).first()
    if current is None:
        return []
    limit = min(now, current) - close_delay()
    hours, hour = [], state.closed_until
    while hour + HOUR <= limit:
        hours.append(hour)
        hour += HOUR
    return hours


def ledger_round(cluster: Cluster, api_client: Any = None, *, now: datetime.datetime | None = None,
                 budget: float | None = None) -> int:
    """The sync leader's task: close the hours due (catching up after downtime, oldest first, within
    `budget` seconds — LEDGER_ROUND_BUDGET — the rest at the next round), then correct late changes.
    Returns the hours closed."""
    budget = _setting("LEDGER_ROUND_BUDGET", 20) if budget is None else budget
    cluster = Cluster.objects.get(pk=cluster.pk)
    started = time.monotonic()
    closed = 0
    for hour in hours_due(cluster=cluster, now=now):
        ledger_hour_close(cluster=cluster, hour=hour, now=now)
        closed += 1
        if time.monotonic() - started > budget:
            return closed
    ledger_corrections(cluster=cluster, now=now, budget=max(1.0, budget - (time.monotonic() - started)))
    return closed


# ---------------------------------------------------------------------------------------------------
# Retention (the snapshot job's part)

def _delete_in_batches(queryset, batch: int) -> int:
    deleted = 0
    while True:
        ids = list(queryset.order_by().values_list("pk", flat=True)[:batch])
        if not ids:
            return deleted
        with transaction.atomic():
            deleted += queryset.model.objects.filter(pk__in=ids).delete()[0]


def ledger_retention_apply(*, now: datetime.datetime | None = None, batch: int | None = None) -> dict[str, int]:
    """Hourly rows (and closed-hour marks) older than LEDGER_HOURLY_RETENTION_DAYS, and pods' lifetimes that
    ended more than LEDGER_CORRECTION_DAYS ago, deleted a batch (RETENTION_BATCH rows) per transaction,
    so that pages and the sync never wait on a long one. Days are kept."""
    now = now or timezone.now()
    batch = int(batch or _setting("RETENTION_BATCH", 5000))
    hourly_before = hour_floor(now - datetime.timedelta(days=_setting("LEDGER_HOURLY_RETENTION_DAYS", 730)))
    hours = _delete_in_batches(LedgerEntry.objects.filter(hour__lt=hourly_before), batch)
    _delete_in_batches(ClosedHour.objects.filter(hour__lt=hourly_before), batch)
    lifetimes = pod_lifetimes_expire(ended_before=now - correction_window(), batch=batch)
    return {"ledger_hours": hours, "pod_lifetimes": lifetimes}


# ---------------------------------------------------------------------------------------------------
# Deserved quota over time

def deserved_history_record(*, quota: Quota, previous: Decimal | None, now: datetime.datetime | None = None) -> None:
    """After a project's quota row was saved: its deserved GPUs from now on (and, the first time, what
    they were before, as from ever)."""
    if quota.project_id is None:
        return
    now = now or timezone.now()
    rows = DeservedHistory.objects.filter(pool_id=quota.pool_id, project_id=quota.project_id)
    last = rows.order_by("-since", "-pk").values_list("gpu_deserved", flat=True).first()
    if last is None:
        if previous is not None and Decimal(previous) != Decimal(quota.gpu_deserved):
            DeservedHistory.objects.create(pool_id=quota.pool_id, project_id=quota.project_id,
                                           gpu_deserved=previous, since=EPOCH)
        else:
            return  # unchanged since ever: the quota row itself says it
    elif Decimal(last) == Decimal(quota.gpu_deserved):
        return
    DeservedHistory.objects.create(pool_id=quota.pool_id, project_id=quota.project_id,
                                   gpu_deserved=quota.gpu_deserved, since=now)


# ---------------------------------------------------------------------------------------------------
# Rates

RATE_FIELDS = ("gpu_model", "mig_profile", "pool", "currency", "valid_from", "gpu_hour", "cpu_core_hour", "memory_gib_hour",
               "description")


NOT_ALLOWED = "Only system administrators set the prices of GPU-hours."


def _require(actor: Any, rate: Rate | None, action: str) -> None:
    """`actor` None: the console itself (the demo, a command)."""
    if actor is None:
        return
    if not (is_system_admin(actor) if rate is None else user_can(actor, rate, action)):
        raise PermissionDenied(NOT_ALLOWED)


def canonical_gpu_model(text: Any) -> Any:
    """The GPU model as the clusters spell it: `nvidia-a100-sxm4-40gb` is the NVIDIA-A100-SXM4-40GB their
    nodes report (nvidia.com/gpu.product), not a second model. The ledger prices rows by that exact
    label, so a rate spelled otherwise would price nothing; an operator who types the name in another
    case means the model the cluster has. A model no node nor ledger row names yet keeps the spelling of
    an existing rate for it (case-insensitively), else the one typed."""
    if not isinstance(text, str):
        return text
    text = text.strip()
    if not text:
        return text
    for found in (Node.objects.filter(gpu_product__iexact=text).order_by("gpu_product")
                  .values_list("gpu_product", flat=True).first(),
                  LedgerDay.objects.filter(gpu_model__iexact=text).order_by("gpu_model")
                  .values_list("gpu_model", flat=True).first(),
                  Rate.objects.filter(gpu_model__iexact=text).order_by("gpu_model")
                  .values_list("gpu_model", flat=True).first()):
        if found:
            return found
    return text


def _rate_values(rate: Rate) -> dict[str, Any]:
    """The values a person sets (compared as values: 2.5 is 2.5000)."""
    return {name: getattr(rate, "pool_id" if name == "pool" else name) for name in RATE_FIELDS}


def _normalise_rate(rate: Rate) -> None:
    rate.gpu_model = canonical_gpu_model(rate.gpu_model)
    if isinstance(rate.mig_profile, str):
        rate.mig_profile = rate.mig_profile.strip().lower()
    if rate.currency:
        rate.currency = rate.currency.strip().upper()


@transaction.atomic
def rate_create(*, actor: Any, **values: Any) -> Rate:
    _require(actor, None, "add")
    rate = Rate(**{k: v for k, v in values.items() if k in RATE_FIELDS})
    _normalise_rate(rate)
    rate.full_clean()
    rate.save()
    audit_record(actor=actor, action=AuditEvent.Action.CREATE, obj=rate, after=snapshot(rate))
    return rate


@transaction.atomic
def rate_update(*, actor: Any, rate: Rate, expected_version: int | None, **values: Any) -> Rate:
    """Change a rate read at `expected_version` (a change made meanwhile is refused, never overwritten)."""
    _require(actor, rate, "change")
    current = Rate.objects.select_for_update().get(pk=rate.pk)
    if expected_version is not None and current.version != expected_version:
        raise ConcurrentUpdate(f"Someone changed this rate meanwhile (version {current.version}, you edited "
                               f"version {expected_version}): nothing was saved; reload it.", current_version=current.version)
    before = snapshot(current)
    stored = _rate_values(current)
    for name, value in values.items():
        if name in RATE_FIELDS:
            setattr(current, name, value)
    _normalise_rate(current)
    current.full_clean()
    if _rate_values(current) == stored:
        return current  # nothing changed (PATCH {}, or the same values): same version, nothing audited
    current.version += 1
    current.save()
    audit_record(actor=actor, action=AuditEvent.Action.UPDATE, obj=current, before=before, after=snapshot(current))
    return current


@transaction.atomic
def rate_delete(*, actor: Any, rate: Rate) -> None:
    _require(actor, rate, "delete")
    before, pk = snapshot(rate), rate.pk
    rate.delete()
    audit_record(actor=actor, action=AuditEvent.Action.DELETE, obj=rate, before=before, object_id=pk)
