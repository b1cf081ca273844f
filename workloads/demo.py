"""The demo's workloads side: the default pool's two GPU types (V100 16GB and 32GB) as two platforms, a few
workloads submitted by the demo's researcher and administrator, and the story the demo tells (`DemoStory`).

With a cluster to talk to (`run_demo`: the emulator), the Jobs are created there through the
submission service and the sync mirrors them; without one (`manage.py demo`), the Jobs the service
would create are mirrored as the sync would (like the demo's nodes and pods).

`DemoStory` is the demo's driver, a console process (a thread of `run_demo`): it submits work through the
console's own submission service as the demo's researchers, with durations of minutes (the emulator's kubelet
runs a pod for its `emulator.gpu-capacity.io/run-seconds` annotation, which only the demo sets:
`submission.Request.demo_pod_annotations`), on a schedule that repeats every ten minutes. What a newcomer sees
within minutes (with KAI Scheduler, the demo's default, or Kueue once switched on the enforcement page):

- batch-scoring borrows ML-Ops' idle A100 40GB (five 2-GPU build-preemptible jobs, beyond its 5 deserved
  GPUs); a minute and a half later serve-vision's in-quota inference arrives and the scheduler reclaims the
  newest running scoring job, which waits again ("Preempted by ..."), and a sixth scoring job queues behind;
- two workloads that wait with the scheduler's reasons: team-vision's 8-GPU training pod (no node of
  a100-80gb has 8 GPUs) and serve-search's 8-GPU inference beyond its deserved quota (non-preemptible);
- short jobs in the default pool (team-nlp's evaluation holds its GPUs idle) that run and succeed;
- shared GPUs: a 1g.10gb MIG notebook and a 3g.40gb inference service in a100-mig (slices of NVIDIA's
  `all-balanced` layout), two fractional inference pods (`gpu-fraction: "0.5"`) that KAI Scheduler puts on
  one A10G of a10g beside the reservation pod holding it, and builds on replicas of the time-sliced L4s.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.contrib.auth import get_user_model

from access.models import RoleAssignment
from access.rules import Role
from nodepools.models import Cluster, NodePool
from projects import services as project_services
from projects.models import Project
from workloads import engine, selectors, services, submission
from workloads.models import Platform, PodTemplate, Workload
from workloads.sync import jobs_mirror

V100_16 = "Tesla-V100-SXM2-16GB"
V100_32 = "Tesla-V100-SXM2-32GB"
# (login, project, name, pools, platform, GPUs, priority class, command)
SUBMISSIONS = [
    ("researcher", "team-vision", "vision-32gb-train", ["default"], "v100-32gb", 2, "train",
     "python train.py --batch-size 64"),
    ("researcher", "team-vision", "vision-finetune", ["a100-80gb", "default"], "", 4, "train",
     "python finetune.py --epochs 3"),
    ("admin", "serve-chat", "chat-canary", ["a100-40gb"], "", 1, "inference", "python serve.py --canary"),
]


def demo_platforms(*, cluster: Cluster) -> None:
    """Platforms v100-16gb (default) and v100-32gb in the default pool, with OSMO's default_user
    template and the shipped CPU / memory / GPU rule sets."""
    pool = cluster.default_pool
    services.workloads_defaults(cluster=cluster)
    if not PodTemplate.objects.filter(cluster=cluster, name="default_user").exists():
        services.pod_template_create(actor=None, cluster=cluster, name="default_user",
                                     body=engine.DEFAULT_POD_TEMPLATES["default_user"],
                                     description="OSMO's default user container (resources from USER_*).")
    for name, product, description in (("v100-16gb", V100_16, "V100 16GB nodes: most training and batch jobs."),
                                       ("v100-32gb", V100_32, "V100 32GB nodes: larger models and batches.")):
        if not Platform.objects.filter(pool=pool, name=name).exists():
            services.platform_create(actor=None, pool=pool, name=name, description=description,
                                     node_selector={"nvidia.com/gpu.product": product}, rule_sets=["default_gpu"],
                                     make_default=name == "v100-16gb")
    services.pool_settings_update(actor=None, pool=pool, common_templates=["default_user"],
                                  rule_sets=["default_cpu", "default_memory"])


def demo_submissions(*, cluster: Cluster, api_client: Any = None) -> list[str]:
    """Submit the demo's workloads (skipping those already there); returns their names."""
    users = {u.username: u for u in get_user_model().objects.filter(username__in={s[0] for s in SUBMISSIONS})}
    made, mirrored = [], []
    for login, project_name, name, pools, platform, gpus, priority_class, command in SUBMISSIONS:
        project = Project.objects.get(cluster=cluster, name=project_name)
        if Workload.objects.filter(cluster=cluster, name=name).exists():
            continue
        request = submission.Request(
            project=project, pools=[NodePool.objects.get(cluster=cluster, name=p) for p in pools],
            image="nvcr.io/nvidia/pytorch:24.05-py3", command=command.split(), platform=platform, gpus=gpus,
            cpu="8", memory="32Gi", priority_class=priority_class, name=name)
        if api_client is not None:
            try:
                submission.workload_submit(actor=users[login], request=request, api_client=api_client)
            except submission.SubmissionRefused as exc:
                if exc.field_name != "name":  # already in the cluster: fine on a second run
                    raise
        else:
            mirrored.append(submission.workload_preview(actor=users[login], request=request).job)
        made.append(name)
    if mirrored:
        jobs_mirror(cluster=cluster, jobs=mirrored)
    return made


# ---------------------------------------------------------------------------------------------------
# The story: what the demo's researchers submit, and when

RUN_SECONDS_ANNOTATION = "emulator.gpu-capacity.io/run-seconds"  # the emulator's kubelet (kubesim.kubelet)
UTILIZATION_ANNOTATION = "emulator.gpu-capacity.io/gpu-utilization"  # its DCGM exporter (kubesim.dcgm)
CYCLE_SECONDS = 600
# The login submitting for each project: team-vision's is the demo's `researcher`; the others are made by
# `demo_researchers` (password gpu-demo, role researcher in their project).
RESEARCHERS = {"team-vision": "researcher"}


@dataclass(frozen=True)
class Arrival:
    at: float  # seconds into a cycle
    project: str
    name: str
    pools: tuple[str, ...]
    gpus: int
    run_seconds: int
    priority_class: str = "train"
    pods: int = 1
    once: bool = False  # only in the first cycle (it waits for good: one is enough)
    utilization: int | None = None  # what the emulated DCGM exporter reports for its GPUs (%)
    gpu_profile: str = ""  # `gpus` slices of this MIG profile per pod (nvidia.com/mig-<profile>)
    gpu_fraction: str = ""  # a KAI gpu-fraction of one GPU per pod (then `gpus` is 0)


STORY = (
    Arrival(0, "batch-scoring", "scoring-a", ("a100-40gb",), 2, 420, "build-preemptible"),
    Arrival(5, "batch-scoring", "scoring-b", ("a100-40gb",), 2, 420, "build-preemptible"),
    Arrival(10, "batch-scoring", "scoring-c", ("a100-40gb",), 2, 420, "build-preemptible"),
    Arrival(15, "batch-scoring", "scoring-d", ("a100-40gb",), 2, 420, "build-preemptible"),
    Arrival(18, "batch-scoring", "scoring-e", ("a100-40gb",), 2, 420, "build-preemptible"),
    Arrival(20, "team-vision", "vision-8gpu", ("a100-80gb",), 8, 600, once=True),
    Arrival(25, "serve-search", "search-8gpu", ("a100-40gb",), 8, 600, "inference", once=True),
    Arrival(30, "team-nlp", "nlp-eval", ("default",), 2, 300, utilization=1),
    Arrival(40, "team-speech", "speech-prep", ("default",), 1, 90, "build", pods=2),
    Arrival(50, "team-robotics", "robotics-sim", ("default",), 4, 180),
    Arrival(90, "serve-vision", "vision-serve", ("a100-40gb",), 2, 240, "inference"),
    Arrival(100, "batch-scoring", "scoring-f", ("a100-40gb",), 2, 240, "build-preemptible"),
    Arrival(200, "serve-chat", "chat-probe", ("a100-40gb",), 1, 150, "inference"),
    Arrival(300, "team-nlp", "nlp-finetune", ("default",), 4, 200),
    Arrival(400, "team-speech", "speech-train", ("default", "a100-80gb"), 2, 150),
    # Shared GPUs (nodepools.demo_cluster.SHARED_POOLS), quota in GPU-equivalents.
    Arrival(35, "team-robotics", "robotics-notebook", ("a100-mig",), 1, 480, "build", gpu_profile="1g.10gb"),
    Arrival(45, "serve-chat", "chat-mig-serve", ("a100-mig",), 1, 540, "inference", gpu_profile="3g.40gb"),
    Arrival(55, "serve-vision", "vision-frac", ("a10g",), 0, 480, "inference", pods=2, gpu_fraction="0.5"),
    Arrival(65, "team-speech", "speech-replicas", ("l4-shared",), 2, 300, "build"),
)


def researcher_login(project: str) -> str:
    return RESEARCHERS.get(project) or f"{project}-researcher"


def demo_researchers(*, cluster: Cluster, password: str = "gpu-demo") -> dict[str, Any]:
    """One researcher login per project of the story (idempotent): the users the story submits as."""
    users = {}
    User = get_user_model()
    for project in Project.objects.filter(cluster=cluster, name__in={a.project for a in STORY}):
        login = researcher_login(project.name)
        user, created = User.objects.get_or_create(username=login)
        if created:
            user.set_password(password)
            user.save()
        if not RoleAssignment.objects.filter(user=user, role=Role.RESEARCHER, project=project).exists():
            project_services.role_assign(actor=None, role=Role.RESEARCHER, user=user, project=project)
        users[project.name] = user
    return users


@dataclass
class DemoStory:
    """Submits the story's arrivals as they fall due (`step(now)`, `now` in seconds on any clock: the
    story starts at the first step). A name the cluster already holds (a demo restarted on its database) is
    skipped; a refusal is reported, never raised."""

    cluster: Cluster
    started: float | None = None
    cycle: float = CYCLE_SECONDS
    done: set[tuple[int, int]] = field(default_factory=set)
    log: list[str] = field(default_factory=list)

    def due(self, now: float) -> list[tuple[int, int, Arrival]]:
        if self.started is None:
            self.started = now
        elapsed = now - self.started
        out = []
        for cycle in range(int(elapsed // self.cycle) + 1):
            for index, arrival in enumerate(STORY):
                if (cycle, index) in self.done or (arrival.once and cycle > 0):
                    continue
                if cycle * self.cycle + arrival.at <= elapsed:
                    out.append((cycle, index, arrival))
        return out

    def step(self, now: float, api_client: Any) -> list[str]:
        """Submit what is due now through the submission service; returns the names submitted."""
        due = self.due(now)
        if not due:
            return []
        users = demo_researchers(cluster=self.cluster)
        enforcer = selectors.enforcer_of(self.cluster)
        submitted = []
        for cycle, index, arrival in due:
            self.done.add((cycle, index))
            if arrival.gpu_fraction and enforcer != "kai":
                continue  # a GPU fraction is KAI Scheduler's sharing: left out while another one enforces
            project = Project.objects.filter(cluster=self.cluster, name=arrival.project).first()
            pools = list(NodePool.objects.filter(cluster=self.cluster, name__in=arrival.pools))
            if project is None or len(pools) != len(arrival.pools) or project.name not in users:
                self.log.append(f"{arrival.name}: project or pools missing")
                continue
            pools.sort(key=lambda p: arrival.pools.index(p.name))
            annotations = {RUN_SECONDS_ANNOTATION: str(arrival.run_seconds)}
            if arrival.utilization is not None:
                annotations[UTILIZATION_ANNOTATION] = str(arrival.utilization)
            name = arrival.name if cycle == 0 else f"{arrival.name}-{cycle + 1}"
            request = submission.Request(
                project=project, pools=pools, image="nvcr.io/nvidia/pytorch:24.05-py3",
                command=["python", "run.py", "--demo"], gpus=arrival.gpus, pods=arrival.pods, cpu="4", memory="16Gi",
                gpu_profile=arrival.gpu_profile, gpu_fraction=arrival.gpu_fraction,
                priority_class=arrival.priority_class, name=name, demo_pod_annotations=annotations)
            try:
                submission.workload_submit(actor=users[project.name], request=request, api_client=api_client)
            except submission.SubmissionRefused as exc:
                if exc.field_name != "name":  # already in the cluster (a restarted demo): fine
                    self.log.append(f"{name}: refused at the {exc.step} step: {exc.text}")
                continue
            submitted.append(name)
        return submitted
