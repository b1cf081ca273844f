"""The console's answers held against the scheduler's decisions (issue 21, point 4).

Hypothesis generates organisations (departments, projects), their quotas (deserved, limits, over-quota
weights, ranks, over-quota off), a GPU pool of a few nodes and a stream of workloads in two waves (train,
build-preemptible, build, inference; one or two pods of 1, 2 or 4 GPUs). A third of the pools are whole GPUs,
a third whole GPUs with KAI fractions (`gpu-fraction` 0.5 or 0.25 of one GPU per pod) among the workloads, a
third A100s cut into seven 1g.10gb slices each (quotas in slices, k of them typed as k/7 GPU-equivalents to
the thousandth; workloads of 1, 2 or 4 slices per pod; KAI's Queues then count slices: `enforcers.desired`).
Every figure is compared in GPU-equivalents. The console writes what it writes in
a cluster: KAI's Queues, shards and PriorityClasses from `enforcers.desired` (`desired_for`), and each Job as
its submission service renders it (`workloads.submission.workload_preview`). The emulator's controllers (Job
controller, KAI Scheduler, kubelets) settle on the manual clock after each wave; what the cluster then holds
is mirrored by the sync's own code (`nodepools.sync.mirror.Mirror`, every registered resource). Then:

- **fair share**: where the pool's demand exceeds its ready GPUs (every GPU asked by a workload KAI does not
  refuse outright: over a limit or non-preemptible beyond the deserved quota never runs, whatever the others
  do), each project's allocated GPUs against the console's fair share (`projects.selectors.cluster_fair_shares`,
  `projects/fairshare.py`): they agree within one GPU (one slice in a MIG pool), or within the project's
  largest gang (KAI's unit of allocation: one PodGroup per Job, its pods all together);
- **why waiting**: for every waiting workload, the category of the console's answer (`projects.waiting`,
  through `workloads.decisions`) against the category of KAI's own reason (its PodGroup's condition).

Documented differences (the real KAI Scheduler decides so too; docs/development/tests.md#held-against-the-scheduler):

- `over-subscribed`: where the deserved quotas (each capped by what its owner asks) add up to more than there
  is to divide — the departments' to more than the pool, or a department's projects' to more than its fair
  share — KAI gives every queue its whole deserved quota (its fair shares then add up to more than the pool),
  so a queue within its deserved quota is never reclaimed and whoever came first keeps its GPUs; the console
  divides by rank, then in proportion to the deserved quotas, as Run:ai documents;
- `undivided`: GPUs that no fair share covers (over-quota weights of 0, limits, over-quota off) go, in KAI, to
  whoever asks (fair shares only decide what is reclaimed): a project then holds more than its fair share;
- `fragmented`: a project below its fair share whose smallest waiting pod fits on no node even with every pod
  KAI could reclaim for it gone: the fair share counts GPUs, KAI places whole pods on nodes (and moves no
  running pod to make room).

Two issues once reported against the emulator, with their smallest examples (the last two tests): KAI wrote
no reason for a job whose allocation an in-queue preemption of the same cycle took back (`no verdict`, still
counted apart should it come back; fixed in the emulator: every waiting PodGroup has its reason in every
cycle); and a missing reclaim from a queue whose fair share is 0, which was KAI keeping to its documented rules
(the reclaimer's job was a gang that would pass its fair share).

Found and fixed on the console's side on the way: over-quota off caps every priority at the deserved quota
(KAI's limit is the quota then: the console said "non-preemptible" where KAI said OverLimit); a pending pod's
pool for the fair share is the one "Why is it waiting?" reads (the console's pool label, KAI's queue), not only
its node selector (the fair share counted no demand of the console's own KAI Jobs); non-preemptible requests
beyond what is left of the project's or department's deserved quota claim no fair share (KAI refuses them).

The test prints the agreement over all generated cases and asserts the thresholds below; the undocumented
disagreements are listed with their cases.
"""
from __future__ import annotations

import itertools
import os
import re
from collections import Counter
from dataclasses import dataclass, field
from decimal import Decimal
from fractions import Fraction

import pytest
from django.db import transaction
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.profiles import examples
from tests.workloads.mirroring import mirror

pytestmark = pytest.mark.django_db

# 500 cases under the `ci` profile (one half of .ci/run), 100 in a contributor's run (tests/profiles.py).
EXAMPLES = examples(ci=500, default=100, env="CONSOLE_AGREEMENT_EXAMPLES")
POOL_LABEL = "console.gpu-capacity.io/node-pool"
CLASSES = ("train", "build-preemptible", "build", "inference")
# Measured over 500 cases (docs/development/tests.md#held-against-the-scheduler): with whole, fraction and MIG pools, fair
# share 98.7 % outright, 99.0 % with the documented differences; categories 100 % outright (96.0 % before the
# emulator wrote a reason for every waiting PodGroup in every cycle).
FAIR_SHARE_THRESHOLD = 0.98  # agreeing or a documented difference
FAIR_SHARE_RAW_THRESHOLD = 0.95  # agreeing outright (the rest: the documented differences the draw hits)
CATEGORY_THRESHOLD = 0.98  # agreeing, or the emulator's reported issue (outright: printed, not asserted, since
# the emulator's missing verdicts come in families of similar cases)


@dataclass(frozen=True)
class Job:
    project: int
    gpus: int  # per pod: GPUs, or 1g.10gb slices in a MIG pool
    pods: int
    klass: str
    wave: int
    fraction: str = ""  # a KAI gpu-fraction of one GPU per pod instead (a pool of whole GPUs)


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
    # The pool's A100s cut into seven 1g.10gb slices each (the MIG manager's all-1g.10gb, mixed strategy): the
    # quotas are counted in slices (k slices: k/7 GPU-equivalents to the thousandth), the jobs ask slices.
    mig: bool = False

    @property
    def unit(self) -> Fraction:
        """One unit of the case's quotas and jobs' `gpus` in GPU-equivalents."""
        return Fraction(1, SLICES) if self.mig else Fraction(1)


SLICES = 7  # 1g.10gb slices of an A100
# Pool shapes drawn: whole GPUs, whole GPUs with KAI fractions among the jobs, MIG slices.
WHOLE, FRACTIONS, MIG = "whole", "fractions", "mig"


@st.composite
def cases(draw, shapes: tuple[str, ...] = (WHOLE,)) -> Case:
    shape = draw(st.sampled_from(shapes))
    # MIG and fraction pools are smaller (their workloads ask less), so that their demand exceeds their supply
    # about as often as a pool of whole GPUs.
    if shape == MIG:
        nodes, per_node = draw(st.integers(1, 2)), 1
        capacity = nodes * per_node * SLICES
    elif shape == FRACTIONS:
        nodes, per_node = draw(st.integers(1, 2)), draw(st.sampled_from((2, 4)))
        capacity = nodes * per_node
    else:
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
            limit = draw(st.one_of(st.none(), st.none(), st.none(), st.integers(own, own + capacity)))
            projects.append(Project(index, own, limit, draw(st.sampled_from((0, 1, 2, 2, 3))),
                                    draw(st.sampled_from((3, 3, 3, 1, 6))),
                                    draw(st.sampled_from((True,) * 6 + (False,)))))
    fraction = st.sampled_from(("", "", "0.5", "0.5", "0.25")) if shape == FRACTIONS else st.just("")
    sizes = (1, 2, 2, 4) if shape == MIG else (1, 1, 2, 4)
    jobs = tuple(Job(draw(st.integers(0, len(projects) - 1)), draw(st.sampled_from(sizes)),
                     draw(st.sampled_from((1, 1, 2))), draw(st.sampled_from(CLASSES + ("train", "train"))),
                     draw(st.integers(1, 2)), draw(fraction))
                 for _ in range(draw(st.integers(1, 12))))
    return Case(nodes, per_node, departments, tuple(projects), jobs, mig=shape == MIG)


# ---------------------------------------------------------------------------------------------------
# One generated case, end to end

_serial = itertools.count()
NO_VERDICT = "no verdict"  # KAI wrote no reason for a waiting pod (fixed: test_kai_says_why_every_pod_waits)


@dataclass
class Outcome:
    fair: list[tuple[str, Decimal, Decimal, Decimal, bool, str]] = field(default_factory=list)
    categories: list[tuple[str, str, str, str, str]] = field(default_factory=list)
    pool_state: str = "demand within supply"


@dataclass
class World:
    """One generated case built: the console's organisation, quotas and KAI enforcement in the database, the
    emulator's cluster (nodes, operands, the console's Queues, shards and PriorityClasses) with both waves
    of workloads submitted and settled, and the sync's mirror of it."""
    admin: object
    cluster: object
    pool: object
    projects: list
    emu: object


def build_world(case: Case, prefix: str) -> World:
    """The world of `case`, shared by this test and the dry run's (tests/workloads/test_fit_agreement.py)."""
    from django.contrib.auth import get_user_model

    from enforcers.services import desired_for, enforcement_set
    from kubesim import KubeEmulator, ManualClock, make_node
    from nodepools import services as pool_services
    from nodepools.demo_cluster import operand_pods
    from projects import services as org_services
    from workloads import submission

    User = get_user_model()
    admin = User.objects.filter(is_superuser=True).first() or User.objects.create_superuser(f"{prefix}-admin",
                                                                                             password="x")
    serial = next(_serial)
    cluster = pool_services.cluster_create(actor=None, name=f"{prefix}-{serial}")
    pool = pool_services.pool_create(actor=None, cluster=cluster, name="gpu", label_key="pool", label_value="gpu")
    departments = [org_services.department_create(actor=None, cluster=cluster, name=f"d{i}")
                   for i in range(len(case.departments))]
    projects = [org_services.project_create(actor=None, department=departments[spec.department], name=f"p{i}")
                for i, spec in enumerate(case.projects)]
    for department, (deserved, weight, rank) in zip(departments, case.departments):
        _quota(pool.quotas.get(department=department), gpu_deserved=_gpus(case, deserved), over_quota_weight=weight,
               rank=rank)
    for project, spec in zip(projects, case.projects):
        _quota(pool.quotas.get(project=project), gpu_deserved=_gpus(case, spec.deserved),
               gpu_limit=None if spec.limit is None else _gpus(case, spec.limit), over_quota_weight=spec.weight,
               rank=spec.rank)
        if not spec.over_quota:
            org_services.project_update(actor=None, project=project, allow_over_quota=False)
    enforcement_set(actor=None, cluster=cluster, enforcer="kai")

    emu = KubeEmulator(clock=ManualClock(), controllers=True)
    nodes = [make_node(f"n{i}", gpus=case.gpus_per_node, labels={"pool": "gpu", POOL_LABEL: "gpu"},
                       mig_config="all-1g.10gb" if case.mig else None)
             for i in range(case.nodes)]
    emu.load(nodes, operand_pods(nodes), namespaces=[f"runai-p{i}" for i in range(len(projects))])
    if case.mig or any(job.fraction for job in case.jobs):
        # The console knows the pool's GPUs before it writes the Queues (a MIG pool's quota in KAI's slices) and
        # takes a MIG profile or a fraction only where a node offers it.
        mirror(cluster, emu)
    for obj in desired_for(cluster, "kai"):
        emu.create(_emulator_key(obj), obj)
    for wave in (1, 2):
        for index, job in enumerate(case.jobs):
            if job.wave != wave:
                continue
            request = submission.Request(project=projects[job.project], pools=[pool], image="trainer:1",
                                         gpus=1 if job.fraction else job.gpus, pods=job.pods,
                                         priority_class=job.klass, cpu="1", memory="1Gi", name=f"w{index}",
                                         gpu_profile="1g.10gb" if case.mig else "", gpu_fraction=job.fraction)
            preview = submission.workload_preview(actor=admin, request=request)
            emu.create("jobs.batch", preview.job)
            emu.clock.advance(1)
        settle(emu)
    mirror(cluster, emu)  # what the sync writes (tests/workloads/mirroring.py)
    return World(admin, cluster, pool, projects, emu)


def run_case(case: Case) -> Outcome:
    world = build_world(case, "loop")
    return judge(world.cluster, world.pool, world.projects, case)


def _gpus(case: Case, units: int) -> Decimal:
    """A quota of the case in GPU-equivalents as a person types it (k slices: k/7 to the thousandth)."""
    from kube.gpu import to_decimal

    return to_decimal(units * case.unit)


def _job_gpus(case: Case, job: Job) -> Decimal:
    """GPU-equivalents of all of a job's pods (KAI's unit of allocation: one PodGroup per Job)."""
    from kube.gpu import to_decimal

    each = Fraction(job.fraction) if job.fraction else job.gpus * case.unit
    return to_decimal(each * job.pods)


def _quota(row, **values) -> None:
    from projects.services import quota_update

    quota_update(actor=None, quota=row, expected_version=row.version, **values)


def _emulator_key(obj: dict) -> str:
    from kubesim.resources import find_resource

    group, _, version = obj["apiVersion"].rpartition("/")
    plural = {"PriorityClass": "priorityclasses", "Queue": "queues", "SchedulingShard": "schedulingshards"}[obj["kind"]]
    return find_resource(group, version, plural).key


_IDLE = re.compile(r"^(queue status: .*|(kai|default)-scheduler: \d+ unschedulable)$")


def settle(emu, most: int = 900, quiet: int = 12) -> None:
    """Tick the controllers (one second apart) until `quiet` ticks in a row change nothing but the schedulers
    saying again what waits, and no Job is waiting out its pod-replacement delay (10 s, doubled per
    consecutive failure — a preempted gang's pods count one each —, at most 6 minutes: kubesim/jobs.py).
    Until then a Job has no pod for KAI to speak of, and the state judged would be a passing one."""
    calm = 0
    for _ in range(most):
        emu.clock.advance(1)
        calm = calm + 1 if all(_IDLE.match(line) for line in emu.tick()) else 0
        if calm >= quiet and not _replacing(emu):
            return
    raise AssertionError(f"the emulator did not settle within {most} ticks")


def _replacing(emu) -> bool:
    """Whether a running Job has fewer active pods than it wants (its Job controller will make them)."""
    for job in emu.list("jobs.batch"):
        spec, status = job.get("spec") or {}, job.get("status") or {}
        if spec.get("suspend") or any(c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
                                      for c in status.get("conditions") or []):
            continue
        parallelism = spec.get("parallelism", 1)
        completions = spec.get("completions")
        wanted = parallelism if completions is None else min(parallelism, completions - (status.get("succeeded") or 0))
        if (status.get("active") or 0) < wanted:
            return True
    return False


def judge(cluster, pool, projects, case: Case) -> Outcome:
    from projects import waiting
    from projects.selectors import cluster_fair_shares
    from workloads import decisions, selectors

    out = Outcome()
    rows = list(_all_workloads(cluster))
    decisions.decisions_attach(rows, user=_admin())
    waiting_rows = [w for w in rows if selectors.display_phase(w) == "Pending"]
    for w in waiting_rows:
        sched = w.decision_reason.category if w.decision_reason is not None else NO_VERDICT
        console = waiting.console_category(w.decision_why.code) if w.decision_why is not None else "none"
        out.categories.append((w.name, sched, console, (w.decision_reason.message if w.decision_reason else ""),
                               (w.decision_why.text if w.decision_why else "")))
    pools, lines = cluster_fair_shares(cluster=cluster)
    gpu_pool = next(p for p in pools if p.pk == pool.pk)
    capacity = Decimal(gpu_pool.gpu_ready)
    # Demand that competes: every GPU asked by a workload KAI does not refuse outright (over a limit,
    # non-preemptible beyond the deserved quota: those never run, whatever the others do).
    refused = {w.name for w in waiting_rows if w.decision_reason is not None
               and w.decision_reason.category in (waiting.LIMIT, waiting.NON_PREEMPTIBLE)}
    demand_of: Counter = Counter()
    for w in rows:
        if w.name not in refused:
            demand_of[w.namespace] += Decimal(w.gpus or 0)
    demand = sum(demand_of.values(), Decimal(0))
    if demand <= capacity:
        return out
    out.pool_state = "pools compared"
    oversubscribed = _oversubscribed(case, projects, lines, pool, demand_of, capacity)
    # GPUs no fair share covers (over-quota weights 0, limits, over-quota off): KAI hands them to whoever asks
    # (fair shares only decide what is reclaimed), the console's fair share leaves them undivided.
    divided = sum((Decimal(lines[("project", p.pk, pool.pk)].fair_share) for p in projects), Decimal(0))
    undivided = capacity - divided
    largest: Counter = Counter()  # KAI's unit of allocation: a Job's pods together (one PodGroup per Job)
    for job in case.jobs:
        largest[job.project] = max(largest[job.project], _job_gpus(case, job))
    for index, project in enumerate(projects):
        line = lines[("project", project.pk, pool.pk)]
        tolerance = max(_gpus(case, 1), largest[index])  # one GPU (one slice of a MIG pool), or the largest gang
        allocated, fair = Decimal(line.allocated), Decimal(line.fair_share)
        agree = abs(allocated - fair) <= tolerance
        documented = ""
        if not agree:
            if project.department_id in oversubscribed:
                documented = "over-subscribed"
            elif allocated > fair and undivided >= min(allocated - fair, undivided) > 0:
                documented = "undivided"
            elif allocated < fair and _fragmented(cluster, project, lines, pool):
                documented = "fragmented"
        out.fair.append((project.name, allocated, fair, tolerance, agree, documented))
    return out


def _fragmented(cluster, project, lines, pool) -> bool:
    """No node could hold the project's smallest waiting pod even with every pod KAI could reclaim for it gone
    (the preemptible pods of the other projects above their fair share): GPUs scattered over nodes. KAI moves
    no running pod to make room (its consolidation is not what the fair share promises)."""
    from django.db.models import Sum

    from nodepools.models import Node, Pod

    waiting = Pod.objects.filter(cluster=cluster, project=project, node__isnull=True, phase="Pending", gpus__gt=0)
    smallest = waiting.order_by("gpus").values_list("gpus", flat=True).first()
    if smallest is None:
        return False
    over = {key[1] for key, line in lines.items() if key[0] == "project" and key[2] == pool.pk
            and Decimal(line.allocated) > Decimal(line.fair_share) and key[1] != project.pk}
    for node in Node.objects.filter(cluster=cluster, pool=pool):
        running = Pod.objects.active().filter(node=node)
        used = running.aggregate(v=Sum("gpus"))["v"] or Decimal(0)
        reclaimable = running.filter(project_id__in=over, priority__lt=100).aggregate(v=Sum("gpus"))["v"] or Decimal(0)
        if Decimal(node.gpu_allocatable) - used + reclaimable >= smallest:
            return False
    return True


def _oversubscribed(case, projects, lines, pool, demand_of, capacity) -> set[int]:
    """Departments (ids) where the deserved quotas, each capped by what its owner asks, add up to more than
    there is to divide (departments: the pool's GPUs; projects: their department's fair share). There KAI
    gives every queue its whole deserved quota (its fair shares add up to more than the pool, so nobody
    within its deserved quota is reclaimed), where the console divides by rank as Run:ai documents."""
    by_department: dict[int, list] = {}
    for project in projects:
        by_department.setdefault(project.department_id, []).append(project)
    asked = {d: sum((demand_of[f"runai-{p.name}"] for p in members), Decimal(0)) for d, members in by_department.items()}
    top = sum((min(Decimal(lines[("department", d, pool.pk)].deserved), asked[d]) for d in by_department), Decimal(0))
    out = set(by_department) if top > capacity else set()
    for d, members in by_department.items():
        inside = sum((min(Decimal(lines[("project", p.pk, pool.pk)].deserved), demand_of[f"runai-{p.name}"])
                      for p in members), Decimal(0))
        if inside > Decimal(lines[("department", d, pool.pk)].fair_share):
            out.add(d)
    return out


def _all_workloads(cluster):
    from workloads import selectors

    return selectors.workload_list(user=_admin()).filter(cluster=cluster)


def _admin():
    from django.contrib.auth import get_user_model

    return get_user_model().objects.filter(is_superuser=True).first()


# ---------------------------------------------------------------------------------------------------

TALLY: dict[str, Counter] = {"fair": Counter(), "category": Counter(), "cases": Counter(), "kinds": Counter(),
                             "shapes": Counter()}
DISAGREEMENTS: list[str] = []


# derandomize: the same cases on every run (500 under the `ci` profile), so that CI judges the code, not the draw.
@settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much])
@given(case=cases(shapes=(WHOLE, FRACTIONS, MIG)))
def _check_case(case: Case) -> None:
    with transaction.atomic():
        outcome = run_case(case)
        transaction.set_rollback(True)
    TALLY["cases"]["generated"] += 1
    TALLY["cases"][outcome.pool_state] += 1
    shape = MIG if case.mig else (FRACTIONS if any(j.fraction for j in case.jobs) else WHOLE)
    TALLY["shapes"][shape] += 1
    TALLY["shapes"][f"{shape}, {outcome.pool_state}"] += 1
    TALLY["shapes"][f"{shape}: waiting workloads"] += len(outcome.categories)
    for name, allocated, fair, tolerance, agree, documented in outcome.fair:
        key = "agree" if agree else (f"documented: {documented}" if documented else "disagree")
        TALLY["fair"][key] += 1
        if not agree:
            DISAGREEMENTS.append(f"fair share {name} ({documented or 'undocumented'}): allocated {allocated}, console "
                                 f"{fair} (±{tolerance}) in {case}")
    for name, sched, console, sched_text, console_text in outcome.categories:
        agree = sched == console
        key = "agree" if agree else ("emulator: no verdict" if sched == NO_VERDICT else f"{sched} vs {console}")
        TALLY["category"][key] += 1
        TALLY["kinds"][sched] += 1
        if not agree:
            DISAGREEMENTS.append(f"category {name}: KAI {sched} ({sched_text!r}) vs console {console} "
                                 f"({console_text!r}) in {case}")


def test_the_consoles_fair_share_and_why_waiting_agree_with_kai(capsys):
    _check_case()
    fair, category = TALLY["fair"], TALLY["category"]
    fair_total, category_total = sum(fair.values()), sum(category.values())
    fair_documented = sum(v for k, v in fair.items() if k.startswith("documented"))
    category_reported = category["emulator: no verdict"]
    fair_rate = fair["agree"] / fair_total if fair_total else 1.0
    fair_explained = (fair["agree"] + fair_documented) / fair_total if fair_total else 1.0
    category_rate = category["agree"] / category_total if category_total else 1.0
    category_explained = (category["agree"] + category_reported) / category_total if category_total else 1.0
    with capsys.disabled():
        print(f"\nagreement over {TALLY['cases']['generated']} generated cases ({TALLY['cases']['pools compared']} "
              f"pools where the demand exceeds the supply): fair share {fair['agree']}/{fair_total} projects "
              f"({fair_rate:.1%}; {fair_explained:.1%} with the documented differences: "
              f"{dict((k, v) for k, v in fair.items() if k != 'agree')}); why-waiting category "
              f"{category['agree']}/{category_total} ({category_rate:.1%}; {category_explained:.1%} with the "
              f"emulator's reported issue: {dict((k, v) for k, v in category.items() if k != 'agree')}); KAI's "
              f"categories of the waiting workloads: {dict(TALLY['kinds'])}; pools: {dict(TALLY['shapes'])}")
        for line in DISAGREEMENTS[:int(os.environ.get("CONSOLE_AGREEMENT_SHOW", "15"))]:
            print("  ", line[:int(os.environ.get("CONSOLE_AGREEMENT_WIDTH", "600"))])
    assert TALLY["cases"]["generated"] >= min(EXAMPLES, 500)
    assert fair["disagree"] / max(fair_total, 1) <= 1 - FAIR_SHARE_THRESHOLD, [
        d for d in DISAGREEMENTS if "undocumented" in d][:5]
    assert fair_rate >= FAIR_SHARE_RAW_THRESHOLD
    undocumented = [k for k in category if k not in ("agree", "emulator: no verdict")]
    assert sum(category[k] for k in undocumented) / max(category_total, 1) <= 1 - CATEGORY_THRESHOLD, [
        d for d in DISAGREEMENTS if d.startswith("category") and NO_VERDICT not in d][:5]


def test_kai_says_why_every_pod_waits():
    """A waiting pod always has KAI's reason (what the console shows first): the smallest failing example the
    agreement test found. Allocate gave w0 (train, 1 GPU) p0's last GPU under its limit of 6, then Preempt let
    build-preemptible w2 take it back with w5: w0 waits, OverLimit, and says so
    (tests/kubesim/test_scheduler_kai.py has the same case over HTTP)."""
    case = Case(nodes=1, gpus_per_node=8, departments=((6, 3, 3),),
                projects=(Project(department=0, deserved=6, limit=None, weight=2, rank=3, over_quota=False),),
                jobs=(Job(0, 1, 1, "train", 2), Job(0, 2, 1, "train", 1), Job(0, 2, 1, "build-preemptible", 2),
                      Job(0, 4, 1, "train", 2), Job(0, 1, 1, "train", 1), Job(0, 1, 1, "train", 1),
                      Job(0, 1, 1, "inference", 1)))
    outcome = run_case(case)
    assert [(name, sched) for name, sched, *_ in outcome.categories if sched == NO_VERDICT] == []


def test_kai_reclaims_nothing_from_a_queue_with_no_fair_share_for_a_gang_past_the_fair_share():
    """Once reported as a missing reclaim (p3, below its fair share, reclaiming nothing from p2, whose fair share
    is 0). KAI is right not to: p3's pending work is w0, a gang of two 2-GPU pods (4 GPUs at once, minMember 2),
    and a queue reclaims only if it stays within its fair share with the job and its saturation after the
    transfer stays below its siblings' (docs/fairness/README.md, "Fair Share", "Reclaim Strategies"): 4 GPUs
    pass p3's fair share (the console's 2; KAI's own is 1, its department's requests counting p7's, which p7's
    limit of 0 never lets run: proportion.go adds every pending pod's request to its queue and each ancestor)
    and its quota of 1 (the other strategy). Freeing p2's two GPUs would besides make room for one pod of the
    two. So p3 holds 0 GPUs, within its largest gang of its fair share (the agreement's tolerance), p2 keeps its
    2, and w0 waits for capacity in both KAI's words and the console's. That KAI does reclaim from a queue whose
    fair share is 0 is shown over HTTP in tests/kubesim/test_scheduler_kai.py."""
    case = Case(nodes=2, gpus_per_node=4, departments=((8, 2, 3), (0, 1, 3), (2, 2, 3)),
                projects=(Project(0, 3, None, 2, 6, True), Project(0, 2, 5, 2, 6, False), Project(1, 0, 6, 1, 1, True),
                          Project(1, 1, 9, 2, 3, True), Project(1, 0, None, 2, 3, False), Project(2, 2, 6, 2, 3, False),
                          Project(2, 0, None, 2, 3, True), Project(2, 0, None, 2, 3, False)),
                jobs=(Job(3, 2, 2, "build-preemptible", 2), Job(0, 1, 2, "inference", 2), Job(1, 1, 2, "inference", 1),
                      Job(2, 1, 2, "build-preemptible", 1), Job(7, 4, 2, "train", 1), Job(7, 1, 2, "train", 1),
                      Job(5, 1, 2, "inference", 2)))
    outcome = run_case(case)
    fair = {name: (allocated, fair, agree) for name, allocated, fair, _tolerance, agree, _ in outcome.fair}
    assert fair["p3"] == (Decimal(0), Decimal("2.000"), True) and fair["p2"] == (Decimal(2), Decimal("0.000"), True)
    from projects import waiting

    assert [(name, sched, console) for name, sched, console, *_ in outcome.categories if name == "w0"] == [
        ("w0", waiting.CAPACITY, waiting.CAPACITY)]
