"""Representations of clusters, node pools and nodes in the API (input is handed to the services)."""
from __future__ import annotations

from decimal import Decimal

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from common.fields import StrictDecimalField, StrictFloatField, StrictIntegerField
from common.api import ModelSerializer, RestrictedPrimaryKeyRelatedField
from nodepools.models import Cluster, Node, NodePool, PlacementStrategy
from access.rules import is_system_admin


class ClusterSerializer(ModelSerializer):
    class Meta:
        model = Cluster
        fields = [
            "id", "name", "description", "kubeconfig_path", "kube_context", "in_cluster",
            "limit_projects_to_department_quota", "prometheus_url", "prometheus_bearer_token_file",
            "prometheus_basic_auth_file", "prometheus_label_matchers", "connection_state", "last_error",
            "last_full_sync", "created", "updated",
        ]
        read_only_fields = ["connection_state", "last_error", "last_full_sync", "created", "updated"]
        extra_kwargs = {"description": {"max_length": 2000}}

    def to_representation(self, instance):
        data = super().to_representation(instance)
        request = self.context.get("request")
        if request is not None and not is_system_admin(request.user):
            # Where the server keeps credentials is for the administrators who configure clusters.
            data["kubeconfig_path"] = ""
            data["kube_context"] = ""
            data["prometheus_bearer_token_file"] = ""
            data["prometheus_basic_auth_file"] = ""
        return data


class ClusterUpdateSerializer(ClusterSerializer):
    class Meta(ClusterSerializer.Meta):
        read_only_fields = ClusterSerializer.Meta.read_only_fields + ["name"]
        extra_kwargs = {f: {"required": False} for f in ClusterSerializer.Meta.fields} | {
            "description": {"required": False, "max_length": 2000}}


def _gpu(obj):
    return getattr(obj, "gpu_metrics", None)


def _round(value, digits=1):
    return None if value is None else round(value, digits)


class GpuMetricsFields(serializers.Serializer):
    """The DCGM exporter's figures, through the cluster's Prometheus (null when unavailable; then
    `gpu_metrics_unavailable` says why)."""

    gpu_utilization = serializers.SerializerMethodField(
        help_text="Average GPU utilization (%) of the GPU devices and MIG instances the DCGM exporter reports "
                  "(DCGM_FI_DEV_GPU_UTIL; a MIG instance's DCGM_FI_PROF_GR_ENGINE_ACTIVE × 100).")
    allocated_gpu_utilization = serializers.SerializerMethodField(
        help_text="Average utilization (%) of the GPU devices a pod holds.")
    idle_allocated_gpus = serializers.SerializerMethodField(
        help_text="GPU devices a pod has held for the whole idle window (GPU_IDLE_WINDOW_MINUTES, default 30) "
                  "with utilization under the idle threshold all along (GPUMETRICS_IDLE_THRESHOLD, default 5 %): "
                  "the Idle GPUs page's definition.")
    gpu_memory_used_mib = serializers.SerializerMethodField(help_text="GPU memory used (MiB, DCGM_FI_DEV_FB_USED).")
    gpu_memory_reported_mib = serializers.SerializerMethodField(
        help_text="GPU memory the exporter reports (MiB, used + free).")
    gpu_metrics_unavailable = serializers.SerializerMethodField(
        help_text="Why the GPU figures are null (e.g. \"Prometheus unreachable: connection refused\"), else null.")

    def get_gpu_utilization(self, obj) -> float | None:
        return _round(_gpu(obj).utilization) if _gpu(obj) else None

    def get_allocated_gpu_utilization(self, obj) -> float | None:
        return _round(_gpu(obj).allocated_utilization) if _gpu(obj) else None

    def get_idle_allocated_gpus(self, obj) -> int | None:
        return _gpu(obj).idle_allocated if _gpu(obj) else None

    def get_gpu_memory_used_mib(self, obj) -> float | None:
        return _gpu(obj).memory_used_mib if _gpu(obj) else None

    def get_gpu_memory_reported_mib(self, obj) -> float | None:
        return _gpu(obj).memory_total_mib if _gpu(obj) else None

    def get_gpu_metrics_unavailable(self, obj) -> str | None:
        return None if _gpu(obj) else (getattr(obj, "gpu_metrics_reason", "") or "not loaded")


GPU_METRICS_FIELDS = ["gpu_utilization", "allocated_gpu_utilization", "idle_allocated_gpus", "gpu_memory_used_mib",
                      "gpu_memory_reported_mib", "gpu_metrics_unavailable"]


class PoolSliceSerializer(serializers.Serializer):
    profile = serializers.CharField()
    count = StrictIntegerField(help_text="Slices the pool's nodes publish.")
    allocatable = StrictIntegerField()
    allocated = StrictIntegerField(help_text="Slices the pool's active pods hold.")
    free = StrictIntegerField(help_text="Slices free on Ready nodes: how many pods of one slice fit now "
                                              "(all at once, for a gang).")
    most_free_on_a_node = StrictIntegerField(help_text="The most slices free on one Ready node.")
    memory_mib = StrictIntegerField(allow_null=True)
    share = StrictDecimalField(max_digits=6, decimal_places=3, help_text="One slice in GPU-equivalents.")


class PoolGpuShapesSerializer(serializers.Serializer):
    exposures = serializers.DictField(child=serializers.DictField(child=StrictIntegerField()),
                                      help_text="Per exposure (whole, mig-mixed, time-slicing, ...): nodes, gpus.")
    slices = PoolSliceSerializer(many=True)
    replicas = serializers.ListField(child=StrictIntegerField(), help_text="Replicas per GPU seen.")
    layouts = serializers.ListField(child=serializers.CharField(), help_text="nvidia.com/mig.config values seen.")


class NodePoolSerializer(GpuMetricsFields, ModelSerializer):
    cluster = RestrictedPrimaryKeyRelatedField(model=Cluster)
    status = serializers.CharField(read_only=True, help_text="Empty, Ready or Unschedulable.")
    label = serializers.CharField(read_only=True)
    node_count = StrictIntegerField(read_only=True)
    ready_node_count = StrictIntegerField(read_only=True)
    gpu_devices = StrictIntegerField(read_only=True, help_text="Physical GPUs of the pool's nodes.")
    gpu_total = StrictDecimalField(max_digits=14, decimal_places=3, read_only=True,
                                         help_text="Allocatable GPUs (GPU-equivalents) of the pool's nodes.")
    gpu_ready = StrictDecimalField(max_digits=14, decimal_places=3, read_only=True,
                                         help_text="Allocatable GPUs of the nodes the console calls Ready.")
    gpu_allocated = StrictDecimalField(max_digits=14, decimal_places=3, read_only=True,
                                             help_text="GPUs the active pods hold on Ready nodes.")
    gpu_allocated_not_ready = StrictDecimalField(
        max_digits=14, decimal_places=3, read_only=True,
        help_text="GPUs active pods hold on nodes that are not Ready (shown apart, in no free figure).")
    gpu_free = StrictDecimalField(max_digits=14, decimal_places=3, read_only=True,
                                        help_text="Σ over Ready nodes of max(0, ready − allocated).")
    gpu_memory_total_mib = StrictIntegerField(read_only=True, help_text="Physical GPU memory, counted once.")
    cpu_total = serializers.SerializerMethodField(help_text="Allocatable CPU cores of the pool's nodes.")
    cpu_allocated = serializers.SerializerMethodField(help_text="CPU cores requested by the pool's running pods.")
    memory_total_bytes = StrictIntegerField(read_only=True)
    memory_allocated_bytes = StrictIntegerField(read_only=True)
    workload_count = StrictIntegerField(read_only=True)
    gpu_shapes = PoolGpuShapesSerializer(read_only=True, allow_null=True, default=None,
                                         help_text="How the pool's GPUs are shared and its MIG slices (one pool's "
                                                   "read only; null in the list).")

    class Meta:
        model = NodePool
        fields = [
            "id", "cluster", "name", "description", "is_default", "label_key", "label_value", "label",
            "gpu_placement", "cpu_placement", "gpu_limit", "topology_key", "mig_config", "device_plugin_config",
            "status", "node_count", "ready_node_count",
            "gpu_devices", "gpu_total", "gpu_ready", "gpu_allocated", "gpu_allocated_not_ready", "gpu_free",
            "gpu_memory_total_mib", "cpu_total", "cpu_allocated",
            "memory_total_bytes", "memory_allocated_bytes", "workload_count", "gpu_shapes", *GPU_METRICS_FIELDS,
            "created", "updated",
        ]
        # The GPU shape is set on the pool's page (a preview of the pods it evicts first), not here.
        read_only_fields = ["is_default", "mig_config", "device_plugin_config", "created", "updated"]

    def get_cpu_total(self, pool) -> Decimal:
        return Decimal(pool.cpu_total_millis) / 1000

    def get_cpu_allocated(self, pool) -> Decimal:
        return Decimal(pool.cpu_allocated_millis) / 1000


class NodePoolCreateSerializer(serializers.Serializer):
    cluster = RestrictedPrimaryKeyRelatedField(model=Cluster)
    name = serializers.CharField(max_length=63)
    label_key = serializers.CharField(max_length=317)
    label_value = serializers.CharField(max_length=63, allow_blank=True)
    description = serializers.CharField(required=False, allow_blank=True, default="", max_length=2000)
    gpu_placement = serializers.ChoiceField(choices=PlacementStrategy.choices, default=PlacementStrategy.BINPACK)
    cpu_placement = serializers.ChoiceField(choices=PlacementStrategy.choices, default=PlacementStrategy.BINPACK)
    gpu_limit = StrictIntegerField(min_value=0, max_value=2**31 - 1, required=False, allow_null=True, default=None)
    topology_key = serializers.CharField(max_length=317, required=False, allow_blank=True, default="",
                                         help_text="Node label of the pool's topology domains (empty: the zone).")


class NodePoolUpdateSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=63, required=False)
    label_key = serializers.CharField(max_length=317, required=False)
    label_value = serializers.CharField(max_length=63, allow_blank=True, required=False)
    description = serializers.CharField(required=False, allow_blank=True, max_length=2000)
    gpu_placement = serializers.ChoiceField(choices=PlacementStrategy.choices, required=False)
    cpu_placement = serializers.ChoiceField(choices=PlacementStrategy.choices, required=False)
    gpu_limit = StrictIntegerField(min_value=0, max_value=2**31 - 1, required=False, allow_null=True)
    topology_key = serializers.CharField(max_length=317, required=False, allow_blank=True)


class GpuSliceSerializer(serializers.Serializer):
    profile = serializers.CharField(help_text="MIG profile, e.g. 1g.10gb.")
    resource = serializers.CharField(help_text="The extended resource pods ask (nvidia.com/mig-1g.10gb; "
                                               "nvidia.com/gpu with the single strategy).")
    count = StrictIntegerField(help_text="Slices the node publishes (capacity).")
    allocatable = StrictIntegerField()
    allocated = StrictIntegerField(help_text="Slices the node's active pods hold.")
    memory_mib = StrictIntegerField(allow_null=True, help_text="Memory of one slice.")
    share = StrictDecimalField(max_digits=6, decimal_places=3,
                                     help_text="One slice in GPU-equivalents (its compute slices over the GPU's).")


class GpuSharingSerializer(serializers.Serializer):
    exposure = serializers.CharField(help_text="none, whole, mig-single, mig-mixed, time-slicing or mps.")
    replicas = StrictIntegerField(help_text="Replicas per GPU (time-slicing, MPS); 1 otherwise.")
    sharing_strategy = serializers.CharField()
    mig_strategy = serializers.CharField()
    mig_config = serializers.CharField(help_text="nvidia.com/mig.config: the MIG manager's layout.")
    mig_config_state = serializers.CharField(help_text="nvidia.com/mig.config.state: pending, rebooting, success, "
                                                       "failed.")
    slices = GpuSliceSerializer(many=True)
    replicas_total = StrictIntegerField(allow_null=True)
    replicas_in_use = StrictIntegerField(allow_null=True)
    fractions_in_use = StrictIntegerField(help_text="Pods holding a KAI gpu-fraction or gpu-memory share.")
    fraction_gpus = StrictDecimalField(max_digits=14, decimal_places=3)


class NodeSerializer(GpuMetricsFields, ModelSerializer):
    status_text = serializers.CharField(read_only=True)
    pool_name = serializers.CharField(source="pool.name", read_only=True, default=None)
    gpu_capacity = serializers.IntegerField(read_only=True, help_text="Physical GPUs, however cut or shared.")
    gpu_allocatable = serializers.DecimalField(max_digits=10, decimal_places=3, read_only=True,
                                               help_text="What pods may use, in GPU-equivalents.")
    gpu_ready = serializers.DecimalField(max_digits=14, decimal_places=3, read_only=True, default=None)
    gpu_allocated = serializers.DecimalField(max_digits=14, decimal_places=3, read_only=True, default=None)
    gpu_free = serializers.DecimalField(max_digits=14, decimal_places=3, read_only=True, default=None)
    gpu_allocated_not_ready = serializers.DecimalField(max_digits=14, decimal_places=3, read_only=True, default=None)
    gpu_sharing = GpuSharingSerializer(source="sharing", read_only=True, default=None)

    class Meta:
        model = Node
        fields = [
            "id", "cluster", "name", "pool", "pool_name", "pool_conflicts", "status", "status_text", "status_reasons",
            "unschedulable", "labels", "taints", "gpu_product", "gpu_capacity", "gpu_allocatable", "gpu_ready",
            "gpu_allocated", "gpu_free", "gpu_allocated_not_ready", "gpu_sharing", "gpu_memory_mib",
            "gpu_family", "mig_strategy", "is_gpu_node", "cpu_capacity_millis", "cpu_allocatable_millis",
            "memory_capacity_bytes", "memory_allocatable_bytes", "zone", "instance_type", "capacity_type",
            "created_in_cluster", *GPU_METRICS_FIELDS, "updated",
        ]
        read_only_fields = fields


class GpuDeviceSerializer(serializers.Serializer):
    """One GPU of a node as the DCGM exporter reports it (a figure it does not serve is null)."""

    index = StrictIntegerField(help_text="The exporter's `gpu` label (-1 when it is not a number).")
    uuid = serializers.CharField(help_text="The GPU's UUID (`GPU-...`).")
    model = serializers.CharField(help_text="The exporter's `modelName`.")
    utilization = StrictFloatField(allow_null=True, help_text="GPU utilization (%, DCGM_FI_DEV_GPU_UTIL; a MIG "
                                   "instance's DCGM_FI_PROF_GR_ENGINE_ACTIVE × 100).")
    memory_used_mib = StrictFloatField(allow_null=True, help_text="GPU memory used (MiB, DCGM_FI_DEV_FB_USED).")
    memory_free_mib = StrictFloatField(allow_null=True, help_text="GPU memory free (MiB, DCGM_FI_DEV_FB_FREE).")
    memory_total_mib = StrictFloatField(allow_null=True, help_text="Used + free (MiB).")
    engine_active = StrictFloatField(
        allow_null=True, help_text="Share of the time the graphics engine was active, 0..1 "
                                   "(DCGM_FI_PROF_GR_ENGINE_ACTIVE; null when the exporter does not serve it).")
    namespace = serializers.CharField(help_text="Namespace of the pod holding the GPU (empty when none does).")
    pod = serializers.CharField(help_text="The pod holding the GPU (empty when none does).")
    container = serializers.CharField(help_text="Its container holding the GPU (empty when none does).")


class NodeGpuDevicesSerializer(serializers.Serializer):
    """A node's GPU devices from its cluster's DCGM exporter, through its Prometheus."""

    node = StrictIntegerField(help_text="The node's id.")
    name = serializers.CharField(help_text="The node's name (the exporter's `Hostname`).")
    gpu_devices = GpuDeviceSerializer(many=True, help_text="Every GPU the exporter reports, in index order.")
    gpu_devices_unavailable = serializers.CharField(
        allow_null=True, help_text="Why `gpu_devices` is empty (e.g. \"Prometheus timed out after 0.5 s\", "
                                   "\"no GPU on this node\"), else null.")


class NodeMoveSerializer(serializers.Serializer):
    pool = RestrictedPrimaryKeyRelatedField(model=NodePool, help_text="Id of the pool to move the node to.")


class GpuShapeRequestSerializer(serializers.Serializer):
    mig_config = serializers.CharField(
        required=False, allow_blank=True, default="", max_length=63,
        help_text="nvidia.com/mig.config to set on the pool's MIG-capable GPU nodes (e.g. all-1g.10gb, all-balanced, "
                  "or a custom layout of your MIG manager's configuration); empty: not set by the console.")
    device_plugin_config = serializers.CharField(
        required=False, allow_blank=True, default="", max_length=63,
        help_text="nvidia.com/device-plugin.config: a configuration of NVIDIA's device plugin ConfigMap (e.g. one "
                  "with time-slicing replicas); empty: not set by the console.")
    confirm = serializers.BooleanField(
        required=False, default=False,
        help_text="false (the default): a dry run, nothing written; true: write the labels to the nodes.")
    previewed = serializers.CharField(
        required=False, allow_blank=True, default=None, allow_null=True,
        help_text="With confirm: the `key` of the dry run you reviewed. When what the change does has changed since "
                  "(a GPU pod or a node more), nothing is written and the answer is 400 naming `mig_config`.")


class ShapeEvictedPodSerializer(serializers.Serializer):
    namespace = serializers.CharField(read_only=True)
    name = serializers.CharField(read_only=True)
    node = serializers.CharField(read_only=True)
    project = serializers.CharField(help_text="Empty for a pod of no project.", read_only=True)
    gpus = serializers.DecimalField(max_digits=10, decimal_places=3, help_text="GPU-equivalents it holds.", read_only=True)


class ShapeLabelChangeSerializer(serializers.Serializer):
    now = serializers.CharField(help_text="The label's value on the node now (empty: not set).", read_only=True)
    asked = serializers.CharField(read_only=True)


class ShapeNodeSerializer(serializers.Serializer):
    node = serializers.CharField(source="node.name", read_only=True)
    changes = serializers.SerializerMethodField(help_text="Per label the shape changes on the node: now and asked.")
    skipped = serializers.CharField(help_text="Why the node is left as it is (e.g. GPUs not MIG-capable), else empty.", read_only=True)
    evicted = ShapeEvictedPodSerializer(many=True, help_text="The GPU pods NVIDIA's MIG manager drains from it.", read_only=True)

    @extend_schema_field(serializers.DictField(child=ShapeLabelChangeSerializer()))
    def get_changes(self, row) -> dict:
        return {label: {"now": now, "asked": asked} for label, (now, asked) in row.changes.items()}


class GpuShapePreviewSerializer(serializers.Serializer):
    pool = serializers.IntegerField(source="pool.pk", read_only=True)
    mig_config = serializers.CharField(read_only=True)
    device_plugin_config = serializers.CharField(read_only=True)
    key = serializers.CharField(help_text="What a confirmation counts for: send it back as `previewed`.", read_only=True)
    nodes = ShapeNodeSerializer(many=True, help_text="Every GPU node of the pool the user may see.", read_only=True)
    evicted = ShapeEvictedPodSerializer(many=True, help_text="Every GPU pod the change evicts.", read_only=True)
    warnings = serializers.ListField(child=serializers.CharField(), read_only=True)


class GpuShapeAppliedSerializer(serializers.Serializer):
    labelled = serializers.ListField(child=serializers.CharField(), help_text="The nodes labelled in the cluster.", read_only=True)
    failed = serializers.DictField(child=serializers.CharField(), help_text="Node -> the cluster's message.", read_only=True)
    preview = GpuShapePreviewSerializer(help_text="The preview the write acted on.", read_only=True)
