"""The console's answers held against the scheduler's decisions (issue 21, point 4).

Hypothesis generates organisations (departments, projects), their quotas (deserved, limits, over-quota
weights, ranks, over-quota off), a GPU pool of a few nodes and a stream of workloads in two waves (train,
build-preemptible, build, inference; one or two pods of 1, 2 or 4 GPUs). The console writes what it writes in
a cluster: KAI's Queues, shards and PriorityClasses from `enforcers.desired` (`desired_for`), and each Job as
its submission service renders it (`workloads.submission.workload_preview`). The emulator's controllers (Job
controller, KAI Scheduler, kubelets) settle on the manual clock after each wave; what the cluster then holds
is mirrored by the sync's own code (`nodepools.sync.mirror.Mirror`, every registered resource). Then:

- **fair share**: where the pool's demand (every GPU asked, running or waiting) exceeds its ready GPUs, each
  project's allocated GPUs against the console's fair share (`projects.selectors.cluster_fair_shares`,
  `projects/fairshare.py`): they agree within one GPU, or within the project's largest pod (a pod is KAI's
  unit of allocation: a batch Job's pods each get a PodGroup);
- **why waiting**: for every waiting workload, the category of the console's answer (`projects.waiting`,
  through `workloads.decisions`) against the category of KAI's own reason (its PodGroup's condition).

Documented differences (the real KAI Scheduler behaves so too; README "Held against the scheduler"):

- `reclaim-granularity`: KAI reclaims only what keeps the reclaiming queue within its fair share *with the
  whole pod* and every victim's queue above its own; a project short of its fair share by less than its
  pending pod stays there — outside the GPU tolerance when its pods are larger than the shortfall's rounding;
- `refused-demand`: a project whose waiting work KAI refuses outright (over its limit, non-preemptible beyond
  its deserved quota) counts that work in its request, so its fair share (console and KAI alike) is more than
  it can ever hold; the rest of the pool runs others' work over their share. Such pools are not compared;
- `fits-elsewhere`: the console says a workload "fits now" from the free GPUs of Ready nodes, while KAI keeps
  it waiting in the same cycle for a reason about nodes (free GPUs that a non-KAI pod or a pod of the same
  cycle holds): counted, not excused.

The test prints the agreement over all generated cases and asserts the thresholds below; every example
whose disagreement is not a documented difference fails it with the case.
"""
from __future__ import annotations

import itertools
import os
import re
from collections import Counter
from dataclasses import dataclass, field
from decimal import Decimal

import pytest
from django.db import transaction
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.workloads.mirroring import mirror

pytestmark = pytest.mark.django_db

EXAMPLES = int(os.environ.get("CONSOLE_AGREEMENT_EXAMPLES", "500"))
POOL_LABEL = "console.gpu-capacity.io/node-pool"
CLASSES = ("train", "build-preemptible", "build", "inference")
FAIR_SHARE_THRESHOLD = 0.95
CATEGORY_THRESHOLD = 0.95


@dataclass(frozen=True)
class Job:
    project: int
    gpus: int  # per pod
    pods: int
    klass: str
    wave: int


@dataclass(frozen=True)
class Project:
    department: int
    deserved: int
    limit: int | None
    weight: int
    rank: int
    over_quota: bool


@dataclass(frozen=True)
class Case:
    nodes: int
    gpus_per_node: int
    departments: tuple[tuple[int, int, int], ...]  # (deserved, weight, rank)
    projects: tuple[Project, ...]
    jobs: tuple[Job, ...]


@st.composite
def cases(draw) -> Case:
    nodes = draw(st.integers(1, 4))
    per_node = draw(st.sampled_from((4, 8)))
    capacity = nodes * per_node
    departments = tuple(
        (draw(st.integers(0, capacity)), draw(st.sampled_from((1, 2, 2, 3))), draw(st.sampled_from((3, 3, 3, 5))))
        for _ in range(draw(st.integers(1, 3))))
    projects = []
    for index, (deserved, _weight, _rank) in enumerate(departments):
        for _ in range(draw(st.integers(1, 3))):
            own = draw(st.integers(0, max(deserved, 1)))
            limit = draw(st.one_of(st.none(), st.integers(own, own + capacity)))
            projects.append(Project(index, own, limit, draw(st.sampled_from((0, 1, 2, 2, 3))),
                                    draw(st.sampled_from((3, 3, 3, 1, 6))), draw(st.sampled_from((True, True, True, False)))))
    jobs = tuple(Job(draw(st.integers(0, len(projects) - 1)), draw(st.sampled_from((1, 1, 2, 4))),
                     draw(st.sampled_from((1, 1, 2))), draw(st.sampled_from(CLASSES + ("train", "train"))),
                     draw(st.integers(1, 2)))
                 for _ in range(draw(st.integers(1, 12))))
    return Case(nodes, per_node, departments, tuple(projects), jobs)


# ---------------------------------------------------------------------------------------------------
# One generated case, end to end

_serial = itertools.count()


@dataclass
class Outcome:
    fair: list[tuple[str, Decimal, Decimal, Decimal, bool, str]] = field(default_factory=list)
    categories: list[tuple[str, str, str, str, str]] = field(default_factory=list)
    pool_state: str = "demand within supply"


def run_case(case: Case) -> Outcome:
    from django.contrib.auth import get_user_model

    from enforcers.services import desired_for, enforcement_set
    from kubesim import KubeEmulator, ManualClock, make_node
    from nodepools import services as pool_services
    from nodepools.demo_cluster import operand_pods
    from projects import services as org_services
    from workloads import submission

    admin = get_user_model().objects.filter(is_superuser=True).first() or get_user_model().objects.create_superuser(
        "loop-admin", password="x")
    serial = next(_serial)
    cluster = pool_services.cluster_create(actor=None, name=f"loop-{serial}")
    pool = pool_services.pool_create(actor=None, cluster=cluster, name="gpu", label_key="pool", label_value="gpu")
    departments = [org_services.department_create(actor=None, cluster=cluster, name=f"d{i}")
                   for i in range(len(case.departments))]
    projects = []
    for i, spec in enumerate(case.projects):
        projects.append(org_services.project_create(actor=None, department=departments[spec.department], name=f"p{i}"))
    for department, (deserved, weight, rank) in zip(departments, case.departments):
        _quota(pool.quotas.get(department=department), gpu_deserved=Decimal(deserved), over_quota_weight=weight,
               rank=rank)
    for project, spec in zip(projects, case.projects):
        _quota(pool.quotas.get(project=project), gpu_deserved=Decimal(spec.deserved),
               gpu_limit=None if spec.limit is None else Decimal(spec.limit), over_quota_weight=spec.weight,
               rank=spec.rank)
        if not spec.over_quota:
            org_services.project_update(actor=None, project=project, allow_over_quota=False)
    enforcement_set(actor=None, cluster=cluster, enforcer="kai")

    emu = KubeEmulator(clock=ManualClock(), controllers=True)
    nodes = [make_node(f"n{i}", gpus=case.gpus_per_node, labels={"pool": "gpu", POOL_LABEL: "gpu"})
             for i in range(case.nodes)]
    emu.load(nodes, operand_pods(nodes), namespaces=[f"runai-p{i}" for i in range(len(projects))])
    for obj in desired_for(cluster, "kai"):
        emu.create(_emulator_key(obj), obj)
    for wave in (1, 2):
        for index, job in enumerate(case.jobs):
            if job.wave != wave:
                continue
            request = submission.Request(project=projects[job.project], pools=[pool], image="trainer:1",
                                         gpus=job.gpus, pods=job.pods, priority_class=job.klass, cpu="1",
                                         memory="1Gi", name=f"w{index}")
            emu.create("jobs.batch", submission.workload_preview(actor=admin, request=request).job)
            emu.clock.advance(1)
        settle(emu)
    mirror(cluster, emu)  # what the sync writes (tests/workloads/mirroring.py)
    return judge(cluster, pool, projects, case)


def _quota(row, **values) -> None:
    from projects.services import quota_update

    quota_update(actor=None, quota=row, expected_version=row.version, **values)


def _emulator_key(obj: dict) -> str:
    from kubesim.resources import find_resource

    group, _, version = obj["apiVersion"].rpartition("/")
    plural = {"PriorityClass": "priorityclasses", "Queue": "queues", "SchedulingShard": "schedulingshards"}[obj["kind"]]
    return find_resource(group, version, plural).key


_IDLE = re.compile(r"^(queue status: .*|(kai|default)-scheduler: \d+ unschedulable)$")


def settle(emu, most: int = 30) -> None:
    """Tick the controllers until a tick changes nothing but the schedulers saying again what waits."""
    for _ in range(most):
        emu.clock.advance(1)
        if all(_IDLE.match(line) for line in emu.tick()):
            return
    raise AssertionError("the emulator did not settle within 30 ticks")


def judge(cluster, pool, projects, case: Case) -> Outcome:
    from projects import waiting
    from projects.selectors import cluster_fair_shares
    from workloads import decisions, selectors

    out = Outcome()
    rows = list(_all_workloads(cluster))
    decisions.decisions_attach(rows, user=_admin())
    waiting_rows = [w for w in rows if selectors.display_phase(w) == "Pending"]
    for w in waiting_rows:
        sched = w.decision_reason.category if w.decision_reason is not None else "none"
        console = waiting.console_category(w.decision_why.code) if w.decision_why is not None else "none"
        out.categories.append((w.name, sched, console, (w.decision_reason.message if w.decision_reason else ""),
                               (w.decision_why.text if w.decision_why else "")))
    pools, lines = cluster_fair_shares(cluster=cluster)
    gpu_pool = next(p for p in pools if p.pk == pool.pk)
    demand = sum((Decimal(w.gpus or 0) for w in rows), Decimal(0))
    refused = {w.namespace for w in waiting_rows if w.decision_reason is not None
               and w.decision_reason.category in (waiting.LIMIT, waiting.NON_PREEMPTIBLE)}
    if demand > Decimal(gpu_pool.gpu_ready):
        out.pool_state = "refused demand" if refused else "pools compared"
    if demand > Decimal(gpu_pool.gpu_ready) and not refused:
        largest: Counter = Counter()
        for job in case.jobs:
            largest[job.project] = max(largest[job.project], job.gpus)
        for index, project in enumerate(projects):
            line = lines[("project", project.pk, pool.pk)]
            tolerance = Decimal(max(1, largest[index]))
            allocated, fair = Decimal(line.allocated), Decimal(line.fair_share)
            out.fair.append((project.name, allocated, fair, tolerance, abs(allocated - fair) <= tolerance, ""))
    return out


def _all_workloads(cluster):
    from workloads import selectors

    return selectors.workload_list(user=_admin()).filter(cluster=cluster)


def _admin():
    from django.contrib.auth import get_user_model

    return get_user_model().objects.filter(is_superuser=True).first()


# ---------------------------------------------------------------------------------------------------

TALLY: dict[str, Counter] = {"fair": Counter(), "category": Counter(), "cases": Counter(), "kinds": Counter()}
DISAGREEMENTS: list[str] = []


@settings(max_examples=EXAMPLES, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much])
@given(case=cases())
def _check_case(case: Case) -> None:
    with transaction.atomic():
        outcome = run_case(case)
        transaction.set_rollback(True)
    TALLY["cases"]["generated"] += 1
    TALLY["cases"][outcome.pool_state] += 1
    for name, allocated, fair, tolerance, agree, _ in outcome.fair:
        TALLY["fair"]["agree" if agree else "disagree"] += 1
        if not agree:
            DISAGREEMENTS.append(f"fair share {name}: allocated {allocated}, console {fair} (±{tolerance}) in {case}")
    for name, sched, console, sched_text, console_text in outcome.categories:
        agree = sched == console
        TALLY["category"]["agree" if agree else f"{sched} vs {console}"] += 1
        TALLY["kinds"][sched] += 1
        if not agree:
            DISAGREEMENTS.append(f"category {name}: KAI {sched} ({sched_text!r}) vs console {console} "
                                 f"({console_text!r}) in {case}")


def test_the_consoles_fair_share_and_why_waiting_agree_with_kai(capsys):
    _check_case()
    fair, category = TALLY["fair"], TALLY["category"]
    fair_total, category_total = sum(fair.values()), sum(category.values())
    fair_rate = fair["agree"] / fair_total if fair_total else 1.0
    category_rate = category["agree"] / category_total if category_total else 1.0
    with capsys.disabled():
        print(f"\nagreement over {TALLY['cases']['generated']} generated cases: fair share {fair['agree']}/{fair_total}"
              f" ({fair_rate:.1%}), why-waiting category {category['agree']}/{category_total} ({category_rate:.1%}); "
              f"category disagreements: {dict((k, v) for k, v in category.items() if k != 'agree')}; "
              f"KAI's categories of the waiting workloads: {dict(TALLY['kinds'])}; pools compared for fair share: "
              f"{TALLY['cases']['pools compared']}, not compared (refused demand): {TALLY['cases']['refused demand']}")
        for line in DISAGREEMENTS[:int(os.environ.get("CONSOLE_AGREEMENT_SHOW", "15"))]:
            print("  ", line[:int(os.environ.get("CONSOLE_AGREEMENT_WIDTH", "600"))])
    assert TALLY["cases"]["generated"] >= min(EXAMPLES, 500)
    assert fair_rate >= FAIR_SHARE_THRESHOLD, DISAGREEMENTS[:5]
    assert category_rate >= CATEGORY_THRESHOLD, DISAGREEMENTS[:5]
