"""Clusters, node pools and the mirror of each cluster's Nodes and Pods (docs/concepts.md)."""
from __future__ import annotations

from decimal import Decimal

from django.core.exceptions import ValidationError
from django.core.validators import URLValidator
from django.db import models
from django.db.models.fields.json import KeyTextTransform
from django.db.models import F, OuterRef, Q, Subquery, Sum, Value
from django.db.models.functions import Coalesce, NullIf
from django.utils import timezone

from access.models import RoleAssignment
from access.rules import RestrictedQuerySet
from gpumetrics import config_from, parse_matchers
from kube import gpu as kube_gpu
from kube.labels import dns1123_label_words, label_key_words, label_value_words
from nodepools import kube


# The console's validators say the rules in words (kube.labels.*_words), not in the API server's regular
# expressions.

def validate_dns1123_label(value: str) -> None:
    errors = dns1123_label_words(value)
    if errors:
        raise ValidationError(errors, code="invalid")


def validate_label_key(value: str) -> None:
    errors = label_key_words(value)
    if errors:
        raise ValidationError(errors, code="invalid")


def validate_prometheus_url(value: str) -> None:
    URLValidator(schemes=["http", "https"], message="Enter the URL of the Prometheus server, "
                 "e.g. http://prometheus.monitoring:9090 (http or https).")(value)


def validate_label_matchers(value: str) -> None:
    try:
        parse_matchers(value)
    except ValueError as exc:
        raise ValidationError(str(exc), code="invalid") from None


def validate_label_value(value: str) -> None:
    errors = label_value_words(value)
    if errors:
        raise ValidationError(errors, code="invalid")


def validate_mig_config(value: str) -> None:
    errors = kube_gpu.mig_config_errors(value)
    if errors:
        raise ValidationError(errors, code="invalid")


def validate_device_plugin_config(value: str) -> None:
    """The name of a configuration in the device plugin's ConfigMap: a label value."""
    errors = label_value_words(value)
    if errors:
        raise ValidationError(errors, code="invalid")


class PlacementStrategy(models.TextChoices):
    BINPACK = "binpack", "Bin-pack"
    SPREAD = "spread", "Spread"


class ConnectionState(models.TextChoices):
    PENDING = "pending", "Not synced yet"
    CONNECTED = "connected", "Connected"
    DEGRADED = "degraded", "Degraded"
    UNREACHABLE = "unreachable", "Unreachable"


class ClusterQuerySet(RestrictedQuerySet):
    access_level = "cluster"
    access_paths = {"cluster": ["pk"]}


class Cluster(models.Model):
    """A Kubernetes cluster, reached through a kubeconfig on the server (never stored credentials)."""

    name = models.CharField(max_length=63, unique=True, validators=[validate_dns1123_label])
    description = models.TextField(blank=True)
    kubeconfig_path = models.CharField(max_length=1024, blank=True, help_text="Path of a kubeconfig file on the server.")
    kube_context = models.CharField(max_length=253, blank=True)
    in_cluster = models.BooleanField(default=False, help_text="Use the pod's service account.")
    limit_projects_to_department_quota = models.BooleanField(
        default=False,
        help_text="When on, projects' deserved quota may not add up to more than their department's.",
    )
    # The cluster's Prometheus (DCGM exporter's GPU utilization and memory): the server's files hold the
    # credentials, the database only their paths.
    prometheus_url = models.CharField(
        "Prometheus URL", max_length=1024, blank=True, validators=[validate_prometheus_url],
        help_text="Prometheus holding this cluster's DCGM exporter series, e.g. http://prometheus.monitoring:9090 "
                  "(empty: no GPU utilization).")
    prometheus_bearer_token_file = models.CharField(
        "Prometheus bearer token file", max_length=1024, blank=True,
        help_text="Path of a file on the server holding the bearer token to send (optional).")
    prometheus_basic_auth_file = models.CharField(
        "Prometheus basic auth file", max_length=1024, blank=True,
        help_text="Path of a file on the server holding one line user:password (optional).")
    prometheus_label_matchers = models.CharField(
        "Prometheus label matchers", max_length=1024, blank=True, validators=[validate_label_matchers],
        help_text='Extra label matchers selecting this cluster\'s series, e.g. cluster="prod-east" (optional).')
    connection_state = models.CharField(max_length=16, choices=ConnectionState, default=ConnectionState.PENDING)
    last_error = models.TextField(blank=True)
    last_full_sync = models.DateTimeField(null=True, blank=True)
    # Bumped with every change hint when the channel layer cannot reach other processes (the
    # in-memory default), so that live pages in the web process notice the sync's changes by polling.
    hint_seq = models.PositiveBigIntegerField(default=0, editable=False)
    # Left every few seconds by the sync process that leads this cluster (see nodepools/sync): a
    # heartbeat older than STALE_AFTER means nobody keeps the mirror current (a hung or dead leader).
    leader_heartbeat = models.DateTimeField(null=True, blank=True, editable=False)
    # Until when the mirror of the cluster's pods is known complete: left by the sync's writer (at most
    # every PODS_CURRENT_EVERY seconds) while its list of pods is done and its watch healthy. The GPU-hours
    # ledger closes an hour only once this passed its end; a pod found gone at the next list ended, as far
    # as anyone knows, at this moment (PodLifetime.ended).
    pods_current_at = models.DateTimeField(null=True, blank=True, editable=False)
    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)

    objects = ClusterQuerySet.as_manager()

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    STALE_AFTER_SECONDS = 30

    def clean(self):
        super().clean()
        if self.prometheus_bearer_token_file and self.prometheus_basic_auth_file:
            raise ValidationError({"prometheus_basic_auth_file": "Give a bearer token file or a basic auth file, not both."})
        if (self.prometheus_bearer_token_file or self.prometheus_basic_auth_file or self.prometheus_label_matchers) \
                and not self.prometheus_url:
            raise ValidationError({"prometheus_url": "Name the Prometheus URL for its credentials and label matchers."})

    @property
    def prometheus(self):
        """The cluster's Prometheus for gpumetrics (a PrometheusConfig), or None when it names none."""
        return config_from(self)

    def stale_since(self, now=None):
        """When the figures shown for this cluster stopped being current, or None while they are.

        Stale = the cluster is unreachable or degraded (since its last full sync), or the sync's
        leader has left no heartbeat for STALE_AFTER_SECONDS (since that heartbeat)."""
        now = now or timezone.now()
        if self.connection_state in (ConnectionState.UNREACHABLE, ConnectionState.DEGRADED):
            return self.last_full_sync or self.leader_heartbeat or self.updated
        if self.leader_heartbeat is not None and (now - self.leader_heartbeat).total_seconds() > self.STALE_AFTER_SECONDS:
            return self.leader_heartbeat
        return None

    @property
    def default_pool(self) -> "NodePool":
        return self.pools.get(is_default=True)


def project_namespace_model():
    """The model of the namespaces projects own. The projects app declares it with a relation to
    Cluster (`Cluster.project_namespaces`); reading it through that relation keeps this floor from
    importing the app above it. Pods belong to the project owning their namespace."""
    return Cluster._meta.get_field("project_namespaces").related_model


class NodePoolQuerySet(RestrictedQuerySet):
    access_level = "cluster"
    access_paths = {"cluster": ["cluster_id"]}

    def with_capacity(self) -> "NodePoolQuerySet":
        """Annotate nodes, GPUs, CPU and memory (total, ready, allocated, free), computed by the database; the
        GPU figures are `nodepools.capacity.pool_gpu_totals` (the one definition of ready, allocated, free)."""
        from nodepools import capacity  # (it reads NodeStatus from here)

        nodes = Node.objects.filter(pool=OuterRef("pk")).order_by().values("pool")
        ready_nodes = nodes.filter(status=NodeStatus.READY)
        pods = Pod.objects.active().filter(node__pool=OuterRef("pk")).order_by().values("node__pool")

        def total(qs, expr, output=models.BigIntegerField()):
            aggregate = expr if isinstance(expr, models.Aggregate) else Sum(expr)
            return Coalesce(Subquery(qs.annotate(v=aggregate).values("v")), Value(0), output_field=output)

        gpu = models.DecimalField(max_digits=14, decimal_places=3)
        gpus = {name: total(nodes, aggregate, models.BigIntegerField() if name in ("gpu_devices", "gpu_memory_total_mib")
                            else gpu)
                for name, aggregate in capacity.pool_gpu_totals().items()}
        return self.annotate(
            node_count=total(nodes, Value(1)),
            ready_node_count=total(ready_nodes, Value(1)),
            **gpus,
            cpu_total_millis=total(nodes, "cpu_allocatable_millis"),
            memory_total_bytes=total(nodes, "memory_allocatable_bytes"),
            cpu_allocated_millis=total(pods, "cpu_millis"),
            memory_allocated_bytes=total(pods, "memory_bytes"),
            # Workloads are the projects' pods; system pods (NVIDIA operands, ...) still use allocation.
            workload_count=total(pods.filter(project__isnull=False), Value(1)),
        )


class NodePool(models.Model):
    """Nodes of one cluster that carry one label `key=value`; `default` holds every other node."""

    DEFAULT_NAME = "default"

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="pools")
    name = models.CharField(max_length=63, validators=[validate_dns1123_label])
    description = models.TextField(blank=True)
    is_default = models.BooleanField(default=False, editable=False)
    label_key = models.CharField(max_length=317, blank=True, validators=[validate_label_key])
    label_value = models.CharField(max_length=63, blank=True, validators=[validate_label_value])
    gpu_placement = models.CharField(
        "GPU placement strategy", max_length=8, choices=PlacementStrategy, default=PlacementStrategy.BINPACK
    )
    cpu_placement = models.CharField(
        "CPU placement strategy", max_length=8, choices=PlacementStrategy, default=PlacementStrategy.BINPACK
    )
    gpu_limit = models.PositiveIntegerField(
        "GPU capacity limit", null=True, blank=True, help_text="At most this many GPUs (empty: no limit)."
    )
    # The node label whose values are the pool's topology domains (where a gang's pods should land together):
    # empty means the zone, topology.kubernetes.io/zone.
    topology_key = models.CharField(
        "topology label", max_length=317, blank=True, validators=[validate_label_key],
        help_text="Node label naming the pool's topology domains, e.g. a rack or NVLink domain label "
                  "(empty: the zone, topology.kubernetes.io/zone).")
    # The pool's GPU shape, set on its GPU nodes by the console (services.pool_gpu_shape_apply) as labels NVIDIA's
    # GPU operator acts on: the MIG manager's layout (nvidia.com/mig.config) and the device plugin's
    # configuration, e.g. one with time-slicing replicas (nvidia.com/device-plugin.config). Empty: the console
    # leaves the nodes' label as it is.
    mig_config = models.CharField(
        "MIG layout", max_length=63, blank=True, validators=[validate_mig_config],
        help_text="The layout NVIDIA's MIG manager cuts the pool's GPUs into, e.g. all-1g.10gb, all-balanced, "
                  "all-disabled or a custom layout of its configuration (empty: not set by the console).")
    device_plugin_config = models.CharField(
        "device plugin configuration", max_length=63, blank=True, validators=[validate_device_plugin_config],
        help_text="The configuration of NVIDIA's device plugin the pool's GPU nodes use, e.g. one with "
                  "time-slicing replicas (empty: not set by the console).")
    # The DCGM exporter's figures summed over the pool's nodes (gpumetrics.GpuFigures as a dict), read
    # from the cluster's Prometheus by the sync's leader every GPUMETRICS_POOLS_EVERY seconds (one query
    # per cluster, off the page's path: the idle count reads a 30-minute window of every GPU); or why not.
    gpu_figures = models.JSONField(null=True, blank=True, editable=False)
    gpu_figures_at = models.DateTimeField(null=True, blank=True, editable=False)
    gpu_figures_reason = models.CharField(max_length=300, blank=True, editable=False)
    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)

    objects = NodePoolQuerySet.as_manager()

    class Meta:
        ordering = ["cluster__name", "-is_default", "created", "pk"]
        constraints = [
            models.UniqueConstraint(fields=["cluster", "name"], name="nodepool_unique_name"),
            models.UniqueConstraint(
                fields=["cluster"], condition=Q(is_default=True), name="nodepool_one_default_per_cluster"
            ),
            models.UniqueConstraint(
                fields=["cluster", "label_key", "label_value"],
                condition=Q(is_default=False),
                name="nodepool_unique_label",
            ),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def status(self) -> str:
        """Empty, Ready or Unschedulable; needs the `with_capacity()` annotations."""
        if not self.node_count:
            return "Empty"
        return "Ready" if self.ready_node_count else "Unschedulable"

    @property
    def label(self) -> str:
        return f"{self.label_key}={self.label_value}" if self.label_key else ""

    ZONE_LABEL = "topology.kubernetes.io/zone"

    @property
    def topology_label(self) -> str:
        """The node label whose values are the pool's topology domains (the zone unless it names one)."""
        return self.topology_key or self.ZONE_LABEL

    def clean(self) -> None:
        if self.is_default:
            if self.label_key or self.label_value:
                raise ValidationError({"label_key": "The default pool has no label: it holds unmatched nodes."})
            return
        if self.name == self.DEFAULT_NAME:
            raise ValidationError({"name": "The name 'default' is reserved for the cluster's default pool."})
        if not self.label_key:
            raise ValidationError({"label_key": "A node pool needs a label key: its nodes are those carrying the label."})
        if self.label_key == kube.CONSOLE_POOL_LABEL:
            raise ValidationError({"label_key": f"{kube.CONSOLE_POOL_LABEL} is the console's own pool label: the "
                                                "console sets it on nodes from their pools, so it cannot define one."})
        clash = (
            NodePool.objects.filter(cluster_id=self.cluster_id, label_key=self.label_key, label_value=self.label_value)
            .exclude(pk=self.pk)
            .first()
        )
        if clash:
            raise ValidationError(
                {"label_value": f"Pool '{clash.name}' already selects nodes by {self.label}."}
            )


class NodeStatus(models.TextChoices):
    READY = "ready", "Ready"
    NOT_READY = "not_ready", "Not ready"
    UNKNOWN = "unknown", "Unknown"


class NodeQuerySet(RestrictedQuerySet):
    access_level = "cluster"
    access_paths = {"cluster": ["cluster_id"]}


class Node(models.Model):
    """A Node mirrored from its cluster; only the sync (and the demo) writes these rows."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="nodes")
    name = models.CharField(max_length=253)
    uid = models.CharField(max_length=64, blank=True)
    pool = models.ForeignKey(NodePool, null=True, on_delete=models.SET_NULL, related_name="nodes")
    # Names of every pool whose label the node carries, when more than one (a conflict).
    pool_conflicts = models.JSONField(default=list, blank=True)
    labels = models.JSONField(default=dict, blank=True)
    taints = models.JSONField(default=list, blank=True)
    conditions = models.JSONField(default=list, blank=True)
    unschedulable = models.BooleanField(default=False)
    status = models.CharField(max_length=16, choices=NodeStatus, default=NodeStatus.UNKNOWN)
    status_reasons = models.JSONField(default=list, blank=True)
    cpu_capacity_millis = models.BigIntegerField(default=0)
    cpu_allocatable_millis = models.BigIntegerField(default=0)
    memory_capacity_bytes = models.BigIntegerField(default=0)
    memory_allocatable_bytes = models.BigIntegerField(default=0)
    # status.capacity / status.allocatable["ephemeral-storage"] (K8_STORAGE of workload validation).
    storage_capacity_bytes = models.BigIntegerField(default=0)
    storage_allocatable_bytes = models.BigIntegerField(default=0)
    # Physical GPUs (however they are cut or shared) and what the node lets pods use, in GPU-equivalents
    # (kube.gpu: a MIG slice its compute slices over the GPU's, a replica 1/replicas); memory per physical GPU.
    gpu_capacity = models.IntegerField("physical GPUs", default=0)
    gpu_allocatable = models.DecimalField("allocatable GPUs (GPU-equivalents)", max_digits=10, decimal_places=3,
                                          default=Decimal(0))
    gpu_product = models.CharField("GPU type", max_length=128, blank=True)
    gpu_memory_mib = models.IntegerField("GPU memory (MiB per GPU)", null=True, blank=True)
    # How the GPUs are shared (kube.gpu.NodeGpus as stored, `nodepools.kube.gpu_sharing`): exposure, replicas,
    # the unit of nvidia.com/gpu in GPU-equivalents, MIG slices by profile, the MIG manager's layout and state.
    gpu_sharing = models.JSONField(default=dict, blank=True)
    # Its exposure (kube.gpu: whole, mig-mixed, mig-single, time-slicing, mps; null for no GPU), kept by the
    # database from `gpu_sharing` and indexed with the pool: the pages find a pool's shared nodes by index.
    gpu_exposure = models.GeneratedField(expression=KeyTextTransform("exposure", "gpu_sharing"),
                                         output_field=models.CharField(max_length=32, null=True), db_persist=True)
    # The layout NVIDIA's MIG manager was asked (its `nvidia.com/mig.config` label) and the state it reports of
    # it (`nvidia.com/mig.config.state`: pending, rebooting, success, failed), kept by the database from the
    # labels, the state indexed: the pages read a node's MIG state without reading its labels, and find the
    # nodes still applying a layout by index.
    mig_config = models.GeneratedField(expression=KeyTextTransform(kube_gpu.LABEL_MIG_CONFIG, "labels"),
                                       output_field=models.CharField(max_length=63, null=True), db_persist=True)
    mig_config_state = models.GeneratedField(expression=KeyTextTransform(kube_gpu.LABEL_MIG_CONFIG_STATE, "labels"),
                                             output_field=models.CharField(max_length=63, null=True), db_persist=True)
    gpu_family = models.CharField(max_length=64, blank=True)
    gpu_count_label = models.IntegerField(null=True, blank=True)
    mig_strategy = models.CharField(max_length=32, blank=True)
    is_gpu_node = models.BooleanField(default=False)
    zone = models.CharField(max_length=128, blank=True)
    instance_type = models.CharField(max_length=128, blank=True)
    capacity_type = models.CharField(max_length=32, blank=True)
    created_in_cluster = models.DateTimeField(null=True, blank=True)
    resource_version = models.CharField(max_length=32, blank=True)
    updated = models.DateTimeField(auto_now=True)
    # What its running pods use (Pod.objects.active(): bound to it, neither Succeeded nor Failed): kept by the
    # database itself, triggers on the pods table (migration 0012_node_usage), whoever writes the pods (the
    # sync's bulk upserts, the demo, tests); Django never writes them (see save()). The nodes table sorts by
    # them and the CSV reads them without summing 50,000 pods per request.
    usage_gpus = models.DecimalField(max_digits=14, decimal_places=3, default=Decimal(0), db_default=Decimal(0),
                                     editable=False)
    usage_cpu_millis = models.BigIntegerField(default=0, db_default=0, editable=False)
    usage_memory_bytes = models.BigIntegerField(default=0, db_default=0, editable=False)
    usage_pods = models.IntegerField(default=0, db_default=0, editable=False)

    USAGE_FIELDS = ("usage_gpus", "usage_cpu_millis", "usage_memory_bytes", "usage_pods")

    objects = NodeQuerySet.as_manager()

    class Meta:
        ordering = ["cluster__name", "name"]
        constraints = [models.UniqueConstraint(fields=["cluster", "name"], name="node_unique_name")]
        indexes = [models.Index(fields=["pool", "status"]), models.Index(fields=["status"]),
                   # The nodes table's sorts by name and by allocated GPUs: an index walk, not a sort of every row.
                   models.Index(fields=["name"], name="node_name"),
                   models.Index(fields=["usage_gpus"], name="node_usage_gpus"),
                   models.Index(fields=["pool", "gpu_exposure"], name="node_gpu_exposure"),
                   models.Index(fields=["mig_config_state"], name="node_mig_config_state")]

    def save(self, *args, **kwargs):
        """An update never writes the usage columns (the database keeps them; this instance's may be stale)."""
        if not self._state.adding and kwargs.get("update_fields") is None and self.pk is not None:
            kwargs["update_fields"] = [f.name for f in self._meta.concrete_fields
                                       if not f.primary_key and not f.generated and f.name not in self.USAGE_FIELDS]
        return super().save(*args, **kwargs)

    def __str__(self) -> str:
        return self.name

    @property
    def main_reason(self) -> str:
        return self.status_reasons[0] if self.status_reasons else ""

    @property
    def status_text(self) -> str:
        if self.status == NodeStatus.NOT_READY:
            return f"Not ready ({self.main_reason})" if self.main_reason else "Not ready"
        return self.get_status_display()


class NodeGpuFigures(models.Model):
    """The DCGM exporter's figures of one GPU node as the sync's leader last read them from its cluster's
    Prometheus (`services.pool_gpu_figures_refresh`, every GPUMETRICS_POOLS_EVERY seconds, the same query
    that sums the pools): what the CSV of every node carries, since a query of a whole fleet's GPUs takes
    Prometheus seconds and this table answers in milliseconds. Keyed by node name (a Node row may come
    and go with its Node); its own narrow table, so that rewriting it every round leaves the Node rows
    alone. How fresh it is, or why there is none, is the round's: its pools' `gpu_figures_at/_reason`."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="node_gpu_figures")
    node_name = models.CharField(max_length=253)
    gpus = models.PositiveIntegerField(default=0)
    utilization = models.FloatField(null=True)
    memory_used_mib = models.FloatField(default=0)
    memory_total_mib = models.FloatField(default=0)
    allocated = models.PositiveIntegerField(default=0)
    allocated_utilization = models.FloatField(null=True)
    idle_allocated = models.PositiveIntegerField(default=0)
    engine_active = models.FloatField(null=True)
    read_at = models.DateTimeField()

    # gpumetrics.GpuFigures' fields, in its order.
    FIGURES = ("gpus", "utilization", "memory_used_mib", "memory_total_mib", "allocated", "allocated_utilization",
               "idle_allocated", "engine_active")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["cluster", "node_name"], name="node_gpu_figures_unique")]

    def __str__(self) -> str:
        return self.node_name


class PodQuerySet(RestrictedQuerySet):
    access_level = "project"
    access_paths = {
        "cluster": ["cluster_id"],
        "department": ["project__department_id"],
        "project": ["project_id"],
    }

    def active(self) -> "PodQuerySet":
        """Pods that count toward allocation: bound to a node, neither Succeeded nor Failed."""
        return self.filter(node__isnull=False).exclude(phase__in=Pod.FINISHED_PHASES)

    def preemptible(self) -> "PodQuerySet":
        return self.filter(priority__lt=kube.PREEMPTIBLE_BELOW)

    def non_preemptible(self) -> "PodQuerySet":
        return self.filter(priority__gte=kube.PREEMPTIBLE_BELOW)


class Pod(models.Model):
    """A Pod mirrored from its cluster, with its effective requests (docs/concepts.md#workloads) already computed."""

    FINISHED_PHASES = ("Succeeded", "Failed")

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="pods")
    namespace = models.CharField(max_length=63)
    name = models.CharField(max_length=253)
    uid = models.CharField(max_length=64, blank=True)
    node_name = models.CharField(max_length=253, blank=True)
    # Resolved from node_name / namespace so that allocation is one join away.
    node = models.ForeignKey(Node, null=True, blank=True, on_delete=models.SET_NULL, related_name="pods")
    # `project` (the project owning the pod's namespace, SET NULL when it goes; related name `pods`) is
    # declared by the projects app on this model (projects/models.py, `Pod.add_to_class`): this floor never
    # names a kind of an app above it. The sync's bulk upsert fills its column by a join (sync/writer.py
    # LINKS); the usage-covering index below and the access path `project__department_id` read it.
    phase = models.CharField(max_length=16, blank=True)
    priority = models.IntegerField(default=0)
    priority_class = models.CharField(max_length=253, blank=True)
    labels = models.JSONField(default=dict, blank=True)
    # spec.nodeSelector: tells which pool the pod was scheduled for ("undrained migrated node").
    node_selector = models.JSONField(default=dict, blank=True)
    ready = models.BooleanField(default=False)
    cpu_millis = models.BigIntegerField(default=0)
    memory_bytes = models.BigIntegerField(default=0)
    # GPU-equivalents (kube.gpu.pod_gpu_demand on its node); `gpu_request` what it asks, node-independent
    # (`nodepools.kube.gpu_request`): whole devices, MIG profiles, a KAI fraction or GPU memory.
    gpus = models.DecimalField(max_digits=10, decimal_places=3, default=Decimal(0))
    gpu_request = models.JSONField(default=dict, blank=True)
    # Its kind (whole, mig, fraction, memory; null when it asks no GPU), kept by the database from
    # `gpu_request`, indexed: the few pods of KAI fractions are found by index, not by reading every pod's request.
    gpu_kind = models.GeneratedField(expression=KeyTextTransform("kind", "gpu_request"),
                                     output_field=models.CharField(max_length=16, null=True), db_persist=True)
    # The unit its GPU-time is billed in on its node and how many of it (kube.gpu.billing_unit): "" whole
    # GPUs, a MIG profile (`1g.10gb`: slices), `replica:<n>` (replicas of a GPU shared n ways), `fraction`.
    gpu_unit = models.CharField(max_length=32, blank=True)
    gpu_units = models.DecimalField(max_digits=10, decimal_places=3, default=Decimal(0))
    # Requests of ephemeral-storage (computed like CPU and memory: kube.requests.pod_requests).
    storage_bytes = models.BigIntegerField(default=0)
    # The scheduler's words while the pod cannot be placed: the PodScheduled condition's message when its
    # status is False ("0/30 nodes are available: …"), else empty.
    scheduling_message = models.TextField(blank=True)
    created_in_cluster = models.DateTimeField(null=True, blank=True)
    # When its allocation began (bound to the node) and, once Succeeded or Failed, ended (kube.pod_times).
    started_in_cluster = models.DateTimeField(null=True, blank=True)
    finished_in_cluster = models.DateTimeField(null=True, blank=True)
    resource_version = models.CharField(max_length=32, blank=True)
    updated = models.DateTimeField(auto_now=True)
    # Who made it and who places it (kube.owners): its controller's kind and name (ownerReferences with
    # `controller: true`; both empty for a bare pod) and `spec.schedulerName` (default-scheduler when unset).
    owner_kind = models.CharField(max_length=63, blank=True)
    owner_name = models.CharField(max_length=253, blank=True)
    scheduler_name = models.CharField(max_length=253, blank=True)
    # The Job that owns it (its `batch.kubernetes.io/job-name` label, else the legacy `job-name` label that
    # Kubernetes before 1.27 sets alone), computed by the database from the labels whoever writes the pod,
    # and indexed with its namespace: a workload's pods are an index lookup, whichever label they carry.
    job_name = models.GeneratedField(
        expression=Coalesce(KeyTextTransform(kube.JOB_NAME_LABEL, "labels"),
                            KeyTextTransform(kube.LEGACY_JOB_NAME_LABEL, "labels")),
        output_field=models.CharField(max_length=253, null=True), db_persist=True)

    # The workload it belongs to, as the workloads table names it (kept by the database): its Job's name, else
    # its controller's (a ReplicaSet, a StatefulSet, ...), else its own (a bare pod is its own workload).
    workload_name = models.GeneratedField(
        expression=Coalesce(KeyTextTransform(kube.JOB_NAME_LABEL, "labels"),
                            KeyTextTransform(kube.LEGACY_JOB_NAME_LABEL, "labels"),
                            NullIf(F("owner_name"), Value("")), F("name")),
        output_field=models.CharField(max_length=253), db_persist=True)

    objects = PodQuerySet.as_manager()

    class Meta:
        ordering = ["cluster__name", "namespace", "name"]
        constraints = [models.UniqueConstraint(fields=["cluster", "namespace", "name"], name="pod_unique_name")]
        indexes = [
            # A node's pods by phase, covering what they hold of its GPUs (the unit billed and how many of it): the
            # MIG slices held per node are summed from the index (`pool_node_gpu_room`). No generated column in it:
            # SQLite never reads an index that holds one as covering.
            models.Index(fields=["node", "phase", "gpu_unit", "gpu_units"], name="pod_node_gpu_units"),
            # Named: `project` is declared from above (projects/models.py), after this class is made.
            models.Index(fields=["project", "phase"], name="nodepools_p_project_6ae51b_idx"),
            # Covers the pages' usage sums (GPUs, CPU, memory of running pods per node, pool, project and the
            # scheduler that placed them): every column they read is in the index, so SQLite and PostgreSQL can
            # read it instead of the rows. A plain composite index (no INCLUDE) so that both databases get the
            # same one.
            models.Index(fields=["node", "phase", "project", "priority", "gpus", "cpu_millis", "memory_bytes",
                                 "scheduler_name"], name="pod_usage_cover"),
            # Only the pods of a Job: the planner's statistics of a full index would count the pods of no Job
            # as one large Job and make a lookup by Job name look like a scan (a fleet of services, a bench).
            models.Index(fields=["cluster", "namespace", "job_name", "name"], name="pod_job",
                         condition=Q(job_name__isnull=False)),
            # The pods of a kind of GPU request (the few of KAI fractions, found without reading the others). Not
            # partial: SQLite plans a partial index only for a query whose condition is written in its text.
            models.Index(fields=["gpu_kind", "node"], name="pod_gpu_kind"),
            # A workload's pods, whatever made them (workloads' rows of Jobs, controllers and bare pods).
            models.Index(fields=["cluster", "namespace", "workload_name"], name="pod_workload"),
        ]

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def preemptible(self) -> bool:
        return kube.is_preemptible(self.priority)


class PodLifetime(models.Model):
    """How long one pod held what it requested (docs/concepts.md#gpu-hours): the sync's writer keeps one row per pod uid
    from the list and the watch (`nodepools.sync.lifetimes`), and keeps it after the pod is gone, so that
    the GPU-hours ledger counts a pod that ran 7 minutes as 7 minutes even once it is deleted.

    `started`: bound to its node. `ended`: null while it counts; else when it finished (its containers'
    finishedAt), was deleted (the DELETED event's time) or was found gone by a later list (the last
    moment the mirror was known complete, `Cluster.pods_current_at`): `end_reason` says which. Pool and GPU
    model are those of its node when first seen (a pod of a node moved later stays with its pool), so
    that a row outlives its node. `recorded` (first written) and `changed` (last change of what the
    ledger counts) tell the ledger which closed hours a late event may have changed. Narrow on purpose:
    read whole every hour."""

    class EndReason(models.TextChoices):
        FINISHED = "finished", "Finished"
        DELETED = "deleted", "Deleted"
        GONE = "gone", "Gone at a later list"
        REPLACED = "replaced", "Replaced by a pod of the same name"

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="pod_lifetimes")
    uid = models.CharField(max_length=64)
    namespace = models.CharField(max_length=63)
    name = models.CharField(max_length=253)
    node_name = models.CharField(max_length=253, blank=True)
    pool_id = models.BigIntegerField(null=True, blank=True)
    gpu_model = models.CharField(max_length=128, blank=True)
    gpus = models.DecimalField(max_digits=10, decimal_places=3, default=Decimal(0))
    # The unit the ledger bills its GPU-time in and how many of it (the pod's `gpu_unit`, `gpu_units`).
    gpu_unit = models.CharField(max_length=32, blank=True)
    gpu_units = models.DecimalField(max_digits=10, decimal_places=3, default=Decimal(0))
    cpu_millis = models.BigIntegerField(default=0)
    memory_bytes = models.BigIntegerField(default=0)
    priority = models.IntegerField(default=0)
    started = models.DateTimeField()
    ended = models.DateTimeField(null=True, blank=True)
    end_reason = models.CharField(max_length=16, choices=EndReason, blank=True)
    recorded = models.DateTimeField()
    changed = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["cluster", "uid"], name="pod_lifetime_unique_uid")]
        indexes = [
            models.Index(fields=["cluster", "started"], name="pod_lifetime_started"),
            models.Index(fields=["cluster", "ended"], name="pod_lifetime_ended"),
            models.Index(fields=["cluster", "changed"], name="pod_lifetime_changed"),
        ]

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name} ({self.uid})"


# This app's part of the ground floor's role assignments: the cluster of a cluster-scoped one (declared from
# here so that access never names a kind of an app above it; the column predates the move).
RoleAssignment.add_to_class(
    "cluster", models.ForeignKey(Cluster, null=True, blank=True, on_delete=models.CASCADE, related_name="+"))


class DataVersion(models.Model):
    """How many times a cluster's mirrored nodes and pods changed: a counter per cluster that the database's own
    triggers raise, in the writing transaction, at every insert, update or delete of a node or pod row, whoever
    writes (the sync's upserts, the ORM, a cascade). Read once per page, it tells a figure computed from those
    rows by an earlier request that it still holds (`nodepools.memo.fleet_memoised`). Never written by the
    console's code but to lock it: who writes a cluster's nodes or pods on PostgreSQL takes its row first
    (`nodepools.versions.lock`), so that two writers of one cluster never wait on each other in turn."""

    # A plain column, not a foreign key: the triggers write it while a cluster's rows are deleted in cascade.
    cluster_id = models.BigIntegerField(primary_key=True)
    seq = models.BigIntegerField(default=0)

    def __str__(self) -> str:
        return f"cluster {self.cluster_id}: {self.seq}"
