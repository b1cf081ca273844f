"""Closing the ledger's hours (the sync leader's task), catching up after the sync was down, correcting
closed hours when a late event changes them (kept as rows of their own), the quota of the time, and
retention by the snapshot job."""
from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest
from django.core.management import call_command

from ledger import selectors, services
from ledger.models import ClosedHour, DeservedHistory, Kind, LedgerDay, LedgerEntry, LedgerState
from nodepools.models import Cluster, PodLifetime

UTC = dt.timezone.utc
H = dt.datetime(2026, 3, 10, 9, tzinfo=UTC)
A100 = "NVIDIA-A100-SXM4-40GB"


def rfc(moment: dt.datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def timed(pod: dict, start: dt.datetime, end: dt.datetime | None = None) -> dict:
    """The pod bound at `start` (and Succeeded at `end`)."""
    for condition in pod["status"]["conditions"]:
        if condition["type"] == "PodScheduled":
            condition["lastTransitionTime"] = rfc(start)
    if end is not None:
        pod["status"]["phase"] = "Succeeded"
        for container in pod["status"]["containerStatuses"]:
            container["state"] = {"terminated": {"exitCode": 0, "finishedAt": rfc(end), "startedAt": rfc(start)}}
    return pod


def run(org, name, project, node, start, end=None, **kw):
    from kubesim import make_pod

    gpus = kw.pop("gpus", 1)
    namespace = f"runai-{project.name}" if project is not None else "system-jobs"
    pod = make_pod(name, namespace, node=node, priority=kw.pop("priority", 50),
                   phase="Running", created=rfc(start - dt.timedelta(seconds=5)),
                   containers=[{"name": "main", "requests": {"cpu": "2", "memory": "4Gi", "nvidia.com/gpu": str(gpus)}}])
    pod["metadata"]["uid"] = f"uid-{name}"
    org.pods = [p for p in org.pods if p["metadata"]["name"] != name] + [timed(pod, start, end)]
    org.load()


def current_until(org, moment: dt.datetime) -> None:
    """As the sync's writer says it: the pods' mirror is complete until `moment`."""
    Cluster.objects.filter(pk=org.cluster.pk).update(pods_current_at=moment)


def rows(org, hour=None, kind=None):
    qs = LedgerEntry.objects.filter(cluster_id=org.cluster.pk)
    if hour is not None:
        qs = qs.filter(hour=hour)
    if kind is not None:
        qs = qs.filter(kind=kind)
    return list(qs)


def gpu_seconds(entries) -> Decimal:
    return sum((e.gpu_seconds for e in entries), Decimal(0))


@pytest.fixture
def ledger_from(org):
    """The ledger of the org's cluster starts at H (as if first asked for then)."""
    services.ledger_state(cluster=org.cluster, now=H)
    return org


def test_the_leader_closes_each_hour_once_the_pods_mirror_passed_its_end(ledger_from):
    org = ledger_from
    run(org, "train", org.rnd_a, "a100-1", H + dt.timedelta(minutes=10), gpus=2)
    current_until(org, H + dt.timedelta(minutes=50))
    assert services.ledger_round(org.cluster, now=H + dt.timedelta(hours=3)) == 0  # the mirror is behind
    # Complete until 10:01: the hour ends at 10:00, but it closes LEDGER_CLOSE_DELAY (120 s) after.
    current_until(org, H + dt.timedelta(hours=1, minutes=1))
    assert services.ledger_round(org.cluster, now=H + dt.timedelta(hours=3)) == 0
    current_until(org, H + dt.timedelta(hours=1, minutes=3))
    assert services.ledger_round(org.cluster, now=H + dt.timedelta(hours=3)) == 1
    [entry] = rows(org, H)
    assert (entry.pool_id, entry.gpu_model, entry.project_id, entry.department_id) == (
        org.a100.pk, A100, org.rnd_a.pk, org.rnd.pk)
    assert entry.gpu_seconds == 2 * 50 * 60 and entry.kind == Kind.CLOSING
    assert LedgerState.objects.get(cluster_id=org.cluster.pk).closed_until == H + dt.timedelta(hours=1)
    # A second round closes nothing twice.
    assert services.ledger_round(org.cluster, now=H + dt.timedelta(hours=3)) == 0
    assert len(rows(org, H)) == 1


def test_after_the_sync_was_down_the_leader_catches_up_oldest_first(ledger_from):
    org = ledger_from
    run(org, "train", org.rnd_a, "a100-1", H - dt.timedelta(hours=1))
    run(org, "short", org.rnd_b, "v100-1", H + dt.timedelta(hours=2, minutes=5), H + dt.timedelta(hours=2, minutes=12))
    # Back after five hours: the list brought every pod's own times; the mirror is current now.
    current_until(org, H + dt.timedelta(hours=5, minutes=30))
    assert services.ledger_round(org.cluster, now=H + dt.timedelta(hours=5, minutes=30)) == 5
    assert [c.hour for c in ClosedHour.objects.order_by("hour")] == [H + dt.timedelta(hours=i) for i in range(5)]
    assert [gpu_seconds(rows(org, H + dt.timedelta(hours=i))) for i in range(5)] == [3600, 3600, 3600 + 420, 3600, 3600]
    short = [e for e in rows(org, H + dt.timedelta(hours=2)) if e.project_id == org.rnd_b.pk]
    assert gpu_seconds(short) == 7 * 60  # the seven minutes it ran, though the sync saw none of them


def test_a_late_event_is_a_correction_row_of_its_own_and_the_closing_stays(ledger_from):
    org = ledger_from
    run(org, "train", org.rnd_a, "a100-1", H - dt.timedelta(minutes=5), gpus=2)
    current_until(org, H + dt.timedelta(hours=1, minutes=5))
    services.ledger_round(org.cluster, now=H + dt.timedelta(hours=1, minutes=5))
    [closing] = rows(org, H)
    assert closing.gpu_seconds == 7200
    # Late news (e.g. the watch was behind): the pod had finished at 9:40.
    run(org, "train", org.rnd_a, "a100-1", H - dt.timedelta(minutes=5), H + dt.timedelta(minutes=40), gpus=2)
    assert PodLifetime.objects.get(uid="uid-train").ended == H + dt.timedelta(minutes=40)
    services.ledger_round(org.cluster, now=H + dt.timedelta(hours=1, minutes=6))
    [correction] = rows(org, H, Kind.CORRECTION)
    assert correction.gpu_seconds == -2 * 20 * 60 and correction.recorded == H + dt.timedelta(hours=1, minutes=6)
    assert correction.over_quota_gpu_seconds == -2 * 20 * 60  # rnd-a deserves nothing in a100
    assert LedgerEntry.objects.get(pk=closing.pk).gpu_seconds == 7200  # the closing is kept as it was
    assert gpu_seconds(rows(org, H)) == 2 * 40 * 60
    assert ClosedHour.objects.get(hour=H).corrected_at == H + dt.timedelta(hours=1, minutes=6)
    # The day holds both, apart; the statement counts the correction and says so.
    days = {d.kind: d.gpu_seconds for d in LedgerDay.objects.filter(day=H.date())}
    assert days == {Kind.CLOSING: 7200, Kind.CORRECTION: -2400}
    statement = selectors.department_statement(user=None, department=org.rnd, month=selectors.Month(2026, 3))
    assert statement.lines == []  # (nobody: nothing visible)
    from tests.conftest import make_user
    from projects import services as project_services
    from access.rules import Role

    viewer = make_user("viewer-of-rnd")
    project_services.role_assign(actor=None, role=Role.DEPARTMENT_VIEWER, user=viewer, department=org.rnd)
    [line] = selectors.department_statement(user=viewer, department=org.rnd, month=selectors.Month(2026, 3)).lines
    assert (line.gpu_hours, line.correction_hours) == (Decimal("1.33"), Decimal("-0.67"))
    # Looking again changes nothing more.
    services.ledger_round(org.cluster, now=H + dt.timedelta(hours=1, minutes=20))
    assert len(rows(org, H, Kind.CORRECTION)) == 1


def test_a_pod_found_at_a_later_list_corrects_the_hours_it_ran_in(ledger_from):
    org = ledger_from
    current_until(org, H + dt.timedelta(hours=2, minutes=5))
    services.ledger_round(org.cluster, now=H + dt.timedelta(hours=2, minutes=5))
    assert gpu_seconds(rows(org)) == 0
    # A list after an outage of the watch finds a pod that ran 9:50 to 10:20 and finished.
    run(org, "batch", org.ops_a, "v100-2", H + dt.timedelta(minutes=50), H + dt.timedelta(hours=1, minutes=20))
    services.ledger_round(org.cluster, now=H + dt.timedelta(hours=2, minutes=6))
    corrections = rows(org, kind=Kind.CORRECTION)
    assert sorted((c.hour, c.gpu_seconds) for c in corrections) == [(H, 600), (H + dt.timedelta(hours=1), 1200)]
    assert {c.project_id for c in corrections} == {org.ops_a.pk}


def test_over_quota_is_measured_against_the_quota_of_the_time(ledger_from):
    org = ledger_from
    from projects import services as project_services

    quota = org.quota(org.rnd_a, org.a100)
    project_services.quota_update(actor=None, quota=quota, expected_version=None, gpu_deserved=Decimal(3))
    DeservedHistory.objects.filter(project_id=org.rnd_a.pk).update(since=H - dt.timedelta(days=1))
    history = list(DeservedHistory.objects.filter(project_id=org.rnd_a.pk, pool_id=org.a100.pk).order_by("since")
                   .values_list("gpu_deserved", flat=True))
    assert history == [Decimal(0), Decimal(3)]  # what it was (from ever), then the change
    quota.refresh_from_db()
    project_services.quota_update(actor=None, quota=quota, expected_version=None, gpu_deserved=Decimal(1))
    DeservedHistory.objects.filter(project_id=org.rnd_a.pk, gpu_deserved=1).update(since=H + dt.timedelta(minutes=30))
    run(org, "train", org.rnd_a, "a100-1", H - dt.timedelta(minutes=1), gpus=2)
    services.ledger_hour_close(cluster=org.cluster, hour=H)
    [entry] = rows(org, H)
    # 2 GPUs: within the 3 deserved until 9:30, then 1 above the 1 deserved.
    assert entry.over_quota_gpu_seconds == 1 * 30 * 60


def test_fractional_gpus_count_by_their_fraction(ledger_from):
    org = ledger_from
    run(org, "notebook", org.rnd_b, "v100-2", H + dt.timedelta(minutes=15), gpus="0.5")
    services.ledger_hour_close(cluster=org.cluster, hour=H)
    [entry] = rows(org, H)
    assert entry.gpu_seconds == Decimal("0.5") * 45 * 60


def test_retention_drops_old_rows_in_batches_and_keeps_the_days(ledger_from, settings):
    org = ledger_from
    from usage.models import UsageSnapshot
    from usage.services import usage_snapshot_take

    now = dt.datetime.now(UTC)
    old = services.hour_floor(now - dt.timedelta(days=800))
    run(org, "train", org.rnd_a, "a100-1", old - dt.timedelta(hours=1), old + dt.timedelta(hours=3))
    for i in range(3):
        services.ledger_hour_close(cluster=org.cluster, hour=old + dt.timedelta(hours=i))
    recent = services.hour_floor(now - dt.timedelta(days=1))
    run(org, "recent", org.rnd_b, "v100-1", recent - dt.timedelta(hours=1))
    services.ledger_hour_close(cluster=org.cluster, hour=recent)
    for days_ago in (20, 15, 1):
        usage_snapshot_take(at=now - dt.timedelta(days=days_ago))
    old_snapshots = UsageSnapshot.objects.filter(taken__lt=now - dt.timedelta(days=14)).count()
    assert old_snapshots and LedgerEntry.objects.filter(hour__lt=now - dt.timedelta(days=730)).count() == 3
    days_before = list(LedgerDay.objects.values_list("day", "gpu_seconds"))
    settings.RETENTION_BATCH = 2  # several batches
    call_command("snapshot_usage", "--once", stdout=open("/dev/null", "w"))
    assert not UsageSnapshot.objects.filter(taken__lt=now - dt.timedelta(days=14)).exists()
    assert UsageSnapshot.objects.filter(taken__gte=now - dt.timedelta(days=2)).exists()
    assert not LedgerEntry.objects.filter(hour__lt=now - dt.timedelta(days=730)).exists()
    assert gpu_seconds(rows(org, recent)) == 3600  # within the window: kept
    assert list(LedgerDay.objects.values_list("day", "gpu_seconds")) == days_before  # days stay
    assert not PodLifetime.objects.filter(uid="uid-train").exists()  # ended long ago: forgotten
    # What is left still makes the old month's statement, from its days.
    month = selectors.Month(old.year, old.month)
    statement = selectors.department_statement(user=_sysadmin(), department=org.rnd, month=month)
    assert statement.exact["gpu_seconds"] == 3600 * 3


def _sysadmin():
    from access.rules import Role
    from projects import services as project_services
    from tests.conftest import make_user

    user = make_user("root-of-all")
    project_services.role_assign(actor=None, role=Role.SYSTEM_ADMIN, user=user)
    return user


def test_the_ledger_is_a_leader_task_of_the_sync():
    from nodepools.sync.tasks import TASKS

    assert TASKS["ledger"].fn is services.ledger_round
