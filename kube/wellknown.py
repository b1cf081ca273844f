"""Other projects' well-known names, held once: Kubernetes', Karpenter's, KAI Scheduler's, Kueue's labels,
annotations and group/version/kinds (NVIDIA's GPU names are in `kube.gpu`).

Standard library only. Each name is taken from the project's published docs or CRDs:

- Kubernetes: "Well-Known Labels, Annotations and Taints" (kubernetes.io/docs/reference/labels-annotations-taints/).
- Karpenter (`karpenter.sh/v1`): "NodePools" and "Well-Known Labels" pages (karpenter.sh/docs/concepts/),
  the CRDs `nodepools.karpenter.sh`, `nodeclaims.karpenter.sh`.
- KAI Scheduler: `pkg/common/constants/constants.go` and `docs/queues/README.md`, the CRDs
  `queues.scheduling.run.ai` (v2), `podgroups.scheduling.run.ai` (v2alpha2),
  `schedulingshards.kai.scheduler` (v1).
- Kueue (`kueue.x-k8s.io/v1beta2`): "Concepts" and "Run a Kubernetes Job" pages, the CRDs of kueue's
  `config/components/crd`.

A kind is `(group, version, plural, kind)`, the tuple `kube.client` and the enforcers use.
"""
from __future__ import annotations

__all__ = [
    "KAI_GROUP", "KAI_MIN_MEMBER_ANNOTATION", "KAI_NODE_POOL_LABEL", "KAI_PODGROUP", "KAI_QUEUE",
    "KAI_QUEUE_LABEL", "KAI_SCHEDULER_NAME", "KAI_SHARD", "KARPENTER_CAPACITY_TYPE_LABEL", "KARPENTER_GROUP",
    "KARPENTER_NODECLAIM", "KARPENTER_NODEPOOL", "KARPENTER_NODEPOOL_LABEL", "KUEUE_CLUSTER_QUEUE",
    "KUEUE_COHORT", "KUEUE_FLAVOR", "KUEUE_GROUP", "KUEUE_LOCAL_QUEUE", "KUEUE_PRIORITY_CLASS",
    "KUEUE_QUEUE_LABEL", "KUEUE_WORKLOAD", "PRIORITY_CLASS", "RUNAI_GROUP", "ZONE_LABEL", "INSTANCE_TYPE_LABEL",
]

# --- Kubernetes ------------------------------------------------------------------------------------
ZONE_LABEL = "topology.kubernetes.io/zone"
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
DEFAULT_SCHEDULER_NAME = "default-scheduler"
PRIORITY_CLASS = ("scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass")

# --- Karpenter -------------------------------------------------------------------------------------
KARPENTER_GROUP, KARPENTER_VERSION = "karpenter.sh", "v1"
KARPENTER_API_VERSION = f"{KARPENTER_GROUP}/{KARPENTER_VERSION}"
KARPENTER_NODEPOOL = (KARPENTER_GROUP, KARPENTER_VERSION, "nodepools", "NodePool")
KARPENTER_NODECLAIM = (KARPENTER_GROUP, KARPENTER_VERSION, "nodeclaims", "NodeClaim")
KARPENTER_NODEPOOL_LABEL = "karpenter.sh/nodepool"
KARPENTER_CAPACITY_TYPE_LABEL = "karpenter.sh/capacity-type"  # spot | on-demand | reserved
KARPENTER_CAPACITY_RESERVATION_LABEL = "karpenter.sh/capacity-reservation-id"
KARPENTER_REGISTERED_LABEL = "karpenter.sh/registered"
KARPENTER_INITIALIZED_LABEL = "karpenter.sh/initialized"
KARPENTER_NODEPOOL_HASH_VERSION_ANNOTATION = "karpenter.sh/nodepool-hash-version"
KARPENTER_DO_NOT_DISRUPT_ANNOTATION = "karpenter.sh/do-not-disrupt"

# --- KAI Scheduler (Run:ai's open core) ------------------------------------------------------------
RUNAI_GROUP = "scheduling.run.ai"
KAI_GROUP = "kai.scheduler"
KAI_QUEUE = (RUNAI_GROUP, "v2", "queues", "Queue")
KAI_PODGROUP = (RUNAI_GROUP, "v2alpha2", "podgroups", "PodGroup")
KAI_SHARD = (KAI_GROUP, "v1", "schedulingshards", "SchedulingShard")
KAI_SCHEDULER_NAME = "kai-scheduler"
KAI_QUEUE_LABEL = "kai.scheduler/queue"
KAI_NODE_POOL_LABEL = "kai.scheduler/node-pool"
KAI_PREEMPTIBILITY_LABEL = "kai.scheduler/preemptibility"
KAI_TOP_OWNER_ANNOTATION = "kai.scheduler/top-owner-metadata"
KAI_SKIP_PODGROUPER_ANNOTATION = "kai.scheduler/skip-podgrouper"
KAI_MIN_MEMBER_ANNOTATION = "kai.scheduler/batch-min-member"

# --- Kueue -----------------------------------------------------------------------------------------
KUEUE_GROUP, KUEUE_VERSION = "kueue.x-k8s.io", "v1beta2"
KUEUE_API_VERSION = f"{KUEUE_GROUP}/{KUEUE_VERSION}"
KUEUE_VISIBILITY_GROUP = "visibility.kueue.x-k8s.io"
KUEUE_FLAVOR = (KUEUE_GROUP, KUEUE_VERSION, "resourceflavors", "ResourceFlavor")
KUEUE_COHORT = (KUEUE_GROUP, KUEUE_VERSION, "cohorts", "Cohort")
KUEUE_CLUSTER_QUEUE = (KUEUE_GROUP, KUEUE_VERSION, "clusterqueues", "ClusterQueue")
KUEUE_LOCAL_QUEUE = (KUEUE_GROUP, KUEUE_VERSION, "localqueues", "LocalQueue")
KUEUE_PRIORITY_CLASS = (KUEUE_GROUP, KUEUE_VERSION, "workloadpriorityclasses", "WorkloadPriorityClass")
KUEUE_WORKLOAD = (KUEUE_GROUP, KUEUE_VERSION, "workloads", "Workload")
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
KUEUE_PRIORITY_CLASS_LABEL = "kueue.x-k8s.io/priority-class"
KUEUE_JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
KUEUE_PODSET_LABEL = "kueue.x-k8s.io/podset"
