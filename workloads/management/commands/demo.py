"""Load the example organisation of docs/getting-started.md#what-the-demo-is, idempotently."""
from __future__ import annotations

import os
from decimal import Decimal

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand
from django.db import transaction

from access.rules import Role
from enforcers.services import enforcement_set
from ledger.demo import demo_ledger_seed
from nodepools import services as pool_services
from nodepools.demo_cluster import (DEPARTMENTS, KARPENTER_LABEL_KEY, KARPENTER_POOLS, POOL_LABEL_KEY, SHARED_POOLS,
                                    SHARED_QUOTAS, demo_objects)
from nodepools.models import Cluster, NodePool
from projects import services
from projects.models import Department, Project, Quota
from workloads.demo import demo_platforms, demo_submissions

CLUSTER = "demo"
# How people read the demo's departments and projects (their Kubernetes names are DNS labels: rnd, ml-ops).
DISPLAY_NAMES = {
    "rnd": "R&D", "ml-ops": "ML Ops",
    "team-vision": "Vision", "team-nlp": "NLP", "team-speech": "Speech", "team-robotics": "Robotics",
    "serve-chat": "Chat serving", "serve-search": "Search serving", "serve-vision": "Vision serving",
    "batch-scoring": "Batch scoring",
}
PASSWORD = "gpu-demo"
POOLS = {"a100-40gb": "5 nodes of 4 A100 40GB for ML-Ops inference",
         "a100-80gb": "5 nodes of 4 A100 80GB for R&D build and training",
         # Pools whose GPUs are shared (MIG slices, time-sliced replicas, KAI fractions): both departments
         # hold quota in them, in GPU-equivalents (SHARED_QUOTAS).
         **{name: description for name, _, _, _, description in SHARED_POOLS}}
# Each department deserves 20 V100 GPUs in the default pool and 20 GPUs of the A100 pool it owns;
# its four projects deserve 5 of each.
DEPARTMENT_GPUS = Decimal(20)
PROJECT_GPUS = Decimal(5)
LOGINS = [
    # (username, role, scope kind, scope name, what the login is for)
    ("admin", Role.SYSTEM_ADMIN, None, None, "system administrator: everything"),
    ("rnd-admin", Role.DEPARTMENT_ADMIN, "department", "rnd", "department administrator of R&D"),
    ("mlops-admin", Role.DEPARTMENT_ADMIN, "department", "ml-ops", "department administrator of ML-Ops"),
    ("rnd-manager", Role.DEPARTMENT_VIEWER, "department", "rnd", "department viewer of R&D (checks its quota)"),
    ("researcher", Role.RESEARCHER, "project", "team-vision", "researcher in project team-vision"),
]


class Command(BaseCommand):
    help = "Load the demo organisation (one cluster, 38 GPU nodes (three pools of shared GPUs), two departments, eight projects, one login per role)."

    def add_arguments(self, parser):
        parser.add_argument("--no-cluster-objects", action="store_true",
                            help="Create the organisation only; leave nodes and pods to the sync.")
        parser.add_argument("--kubeconfig", metavar="PATH",
                            help="Register cluster demo at this kubeconfig (e.g. the emulator's); implies "
                                 "--no-cluster-objects: `sync_clusters` mirrors its nodes and pods.")
        parser.add_argument("--context", default="", help="kubeconfig context for --kubeconfig")

    @transaction.atomic
    def handle(self, *args, **options):
        cluster = Cluster.objects.filter(name=CLUSTER).first() or pool_services.cluster_create(
            actor=None, name=CLUSTER, description="Demo cluster of the node-pools planning example."
        )
        if options.get("kubeconfig"):
            options["no_cluster_objects"] = True
            pool_services.cluster_update(actor=None, cluster=cluster, in_cluster=False,
                                         kubeconfig_path=os.path.abspath(options["kubeconfig"]),
                                         kube_context=options.get("context") or "")
            # The demo shows the console acting on its cluster: KAI Scheduler's queues from the quotas.

            enforcement_set(actor=None, cluster=cluster, enforcer="kai")
        pools = {"default": cluster.default_pool}
        for name, description in POOLS.items():
            pools[name] = NodePool.objects.filter(cluster=cluster, name=name).first() or pool_services.pool_create(
                actor=None, cluster=cluster, name=name, label_key=POOL_LABEL_KEY, label_value=name,
                description=description,
            )
        if options.get("kubeconfig"):
            # The emulator runs Karpenter (kubesim.karpenter): two pools backed by its NodePools.
            for name, description in KARPENTER_POOLS.items():
                pools[name] = NodePool.objects.filter(cluster=cluster, name=name).first() or pool_services.pool_create(
                    actor=None, cluster=cluster, name=name, label_key=KARPENTER_LABEL_KEY, label_value=name,
                    description=description,
                )
        for department_name, (project_names, owned_pool) in DEPARTMENTS.items():
            department = Department.objects.filter(cluster=cluster, name=department_name).first() or (
                services.department_create(actor=None, cluster=cluster, name=department_name,
                                           display_name=DISPLAY_NAMES.get(department_name, ""))
            )
            if not department.display_name and DISPLAY_NAMES.get(department_name):
                services.department_update(actor=None, department=department,
                                           display_name=DISPLAY_NAMES[department_name])
            self._set_gpus(department.quotas.get(pool=pools["default"]), DEPARTMENT_GPUS)
            self._set_gpus(department.quotas.get(pool=pools[owned_pool]), DEPARTMENT_GPUS)
            services.department_priority_set(actor=None, department=department,
                                             pools=[pools[owned_pool], pools["default"]])
            for project_name in project_names:
                project = Project.objects.filter(cluster=cluster, name=project_name).first() or (
                    services.project_create(actor=None, department=department, name=project_name,
                                            display_name=DISPLAY_NAMES.get(project_name, ""))
                )
                if not project.display_name and DISPLAY_NAMES.get(project_name):
                    services.project_update(actor=None, project=project, display_name=DISPLAY_NAMES[project_name])
                self._set_gpus(project.quotas.get(pool=pools["default"]), PROJECT_GPUS)
                self._set_gpus(project.quotas.get(pool=pools[owned_pool]), PROJECT_GPUS)
            for pool_name, quotas in SHARED_QUOTAS.items():
                own, projects = quotas[department_name]
                self._set_gpus(department.quotas.get(pool=pools[pool_name]), own)
                for project_name, gpus in projects.items():
                    self._set_gpus(Project.objects.get(cluster=cluster, name=project_name).quotas.get(
                        pool=pools[pool_name]), gpus)
        if not options["no_cluster_objects"]:
            nodes, pods = demo_objects()
            pool_services.cluster_objects_replace(cluster=cluster, nodes=nodes, pods=pods)
        self._logins(cluster)
        # GPU-hours: rates for the demo's GPU models and thirty days of the ledger, so that the current
        # month's statement shows from the start (ledger/demo.py).

        rows = demo_ledger_seed(cluster=cluster)
        if rows:
            self.stdout.write(f"GPU-hours ledger: thirty days of history ({rows} hourly rows) and rates.")
        # Workloads through pools: the default pool's two platforms; without a cluster to submit to, the
        # demo's workloads as the sync would mirror them (run_demo submits them to the emulator).

        demo_platforms(cluster=cluster)
        if not options["no_cluster_objects"]:
            demo_submissions(cluster=cluster)

    @staticmethod
    def _set_gpus(quota: Quota, gpus: Decimal) -> None:
        if quota.gpu_deserved != gpus:
            services.quota_update(actor=None, quota=quota, expected_version=None, gpu_deserved=gpus)

    def _logins(self, cluster: Cluster) -> None:
        User = get_user_model()
        self.stdout.write("Demo logins (password for each: %s):" % PASSWORD)
        for username, role, scope, scope_name, purpose in LOGINS:
            user, _ = User.objects.get_or_create(username=username)
            user.set_password(PASSWORD)
            user.is_staff = role == Role.SYSTEM_ADMIN  # the Django admin, for system administrators
            user.save()
            target = {}
            if scope == "department":
                target["department"] = Department.objects.get(cluster=cluster, name=scope_name)
            elif scope == "project":
                target["project"] = Project.objects.get(cluster=cluster, name=scope_name)
            services.role_assign(actor=None, role=role, user=user, **target)
            self.stdout.write(f"  {username:<12} {purpose}")
