"""The demo's workloads side: the default pool's two GPU types (V100 16GB and 32GB) as two platforms, and a few workloads submitted by the demo's researcher and administrator.

With a cluster to talk to (`run_demo`: the emulator), the Jobs are created there through the
submission service and the sync mirrors them; without one (`manage.py demo`), the Jobs the service
would create are mirrored as the sync would (like the demo's nodes and pods)."""
from __future__ import annotations

from typing import Any

from nodepools.models import Cluster, NodePool

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
    from workloads import engine, services
    from workloads.models import Platform, PodTemplate

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
    from django.contrib.auth import get_user_model

    from projects.models import Project
    from workloads import submission
    from workloads.models import Workload
    from workloads.sync import jobs_mirror

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
