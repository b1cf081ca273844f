"""Clusters, node pools and nodes over the API: reads through restrict(), writes through the services."""
from __future__ import annotations

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from common.api import RestrictedQuerysetMixin
from nodepools import hints, selectors, services
from nodepools.api import serializers as s
from nodepools.filtersets import ClusterFilterSet, NodeFilterSet, NodePoolFilterSet
from nodepools.models import Cluster, Node, NodePool


class ClusterViewSet(RestrictedQuerysetMixin, viewsets.ModelViewSet):
    """Clusters. Reading: anyone with a role in the cluster; writing: system administrators."""

    serializer_class = s.ClusterSerializer
    filterset_class = ClusterFilterSet
    ordering_fields = ["name", "created", "connection_state", "last_full_sync"]
    ordering = ["name"]
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]

    def base_queryset(self):
        return Cluster.objects.all()

    def get_serializer_class(self):
        return s.ClusterUpdateSerializer if self.action == "partial_update" else s.ClusterSerializer

    def perform_create(self, serializer):
        serializer.instance = services.cluster_create(actor=self.request.user, **serializer.validated_data)

    def perform_update(self, serializer):
        serializer.instance = services.cluster_update(
            actor=self.request.user, cluster=serializer.instance, **serializer.validated_data
        )

    def perform_destroy(self, instance):
        services.cluster_delete(actor=self.request.user, cluster=instance)


class NodePoolViewSet(RestrictedQuerysetMixin, viewsets.ModelViewSet):
    """Node pools with capacity and allocation. Reading: anyone with a role in the cluster; writing:
    system administrators."""

    serializer_class = s.NodePoolSerializer
    filterset_class = NodePoolFilterSet
    ordering_fields = ["name", "created", "node_count", "gpu_total", "gpu_allocated", "workload_count"]
    ordering = ["cluster__name", "-is_default", "created", "pk"]
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]

    def base_queryset(self):
        return NodePool.objects.select_related("cluster").with_capacity()

    # The DCGM exporter's figures of the page's pools, as the sync's leader last read them (no Prometheus query).
    def paginate_queryset(self, queryset):
        page = super().paginate_queryset(queryset)
        if page is not None:
            selectors.pools_attach_gpu_metrics(list(page))
        return page

    def get_object(self):
        pool = super().get_object()
        if self.request.method == "GET":
            selectors.pools_attach_gpu_metrics([pool])
            if self.action == "retrieve":
                # How its GPUs are shared and its MIG slices (two queries; not in the list: no per-row query).
                pool.gpu_shapes = selectors.pool_gpu_shapes(pool)
        return pool

    def _read(self, pool):
        fresh = self.get_queryset().get(pk=pool.pk)
        selectors.pools_attach_gpu_metrics([fresh])
        return s.NodePoolSerializer(fresh, context=self.get_serializer_context()).data

    @extend_schema(request=s.NodePoolCreateSerializer, responses={201: s.NodePoolSerializer})
    def create(self, request, *args, **kwargs):
        form = s.NodePoolCreateSerializer(data=request.data, context=self.get_serializer_context())
        form.is_valid(raise_exception=True)
        pool = services.pool_create(actor=request.user, **form.validated_data)
        return Response(self._read(pool), status=status.HTTP_201_CREATED)

    @extend_schema(request=s.NodePoolUpdateSerializer, responses={200: s.NodePoolSerializer})
    def partial_update(self, request, *args, **kwargs):
        pool = self.get_object()
        form = s.NodePoolUpdateSerializer(data=request.data, context=self.get_serializer_context())
        form.is_valid(raise_exception=True)
        services.pool_update(actor=request.user, pool=pool, **form.validated_data)
        return Response(self._read(pool))

    def perform_destroy(self, instance):
        services.pool_delete(actor=self.request.user, pool=instance)

    @extend_schema(
        request=s.GpuShapeRequestSerializer,
        responses={
            200: OpenApiResponse(s.GpuShapePreviewSerializer, description="The dry run (`confirm` false): the nodes "
                                 "whose labels change, the GPU pods NVIDIA's MIG manager drains, the warnings; "
                                 "nothing written."),
            202: OpenApiResponse(s.GpuShapeAppliedSerializer, description="`confirm` true: the pool keeps the shape "
                                 "and the cluster took the labels of the nodes in `labelled` (NVIDIA's GPU operator "
                                 "applies them; the nodes' slices and `mig_config_state` follow as the sync brings "
                                 "them back); `failed` names the nodes the cluster refused."),
            400: OpenApiResponse(description="`errors.mig_config` or `errors.device_plugin_config` says which rule "
                                 "refused the shape, or that the change differs from the dry run `previewed`."),
            403: OpenApiResponse(description="Only system administrators set a pool's GPU shape."),
        },
    )
    @action(detail=True, methods=["post"], url_path="gpu-shape")
    def gpu_shape(self, request, pk=None):
        """Set the pool's GPU shape (its MIG layout and device plugin configuration), as the pool's page does: a dry
        run first (`confirm` false), then the write with `confirm` true and the dry run's `key` as `previewed`."""
        pool = self.get_object()
        form = s.GpuShapeRequestSerializer(data=request.data, context=self.get_serializer_context())
        form.is_valid(raise_exception=True)
        data = form.validated_data
        shape = {"mig_config": data["mig_config"].strip(), "device_plugin_config": data["device_plugin_config"].strip()}
        if not data["confirm"]:
            preview = services.pool_gpu_shape_preview(actor=request.user, pool=pool, **shape)
            return Response(s.GpuShapePreviewSerializer(preview).data)
        done = services.pool_gpu_shape_apply(actor=request.user, pool=pool, **shape, previewed=data.get("previewed"))
        try:  # live pages refetch (a hint lost must not fail the write that happened)
            hints.publish(pool.cluster_id, ["pools", "nodes"])
        except Exception:
            pass
        return Response(s.GpuShapeAppliedSerializer(done).data, status=status.HTTP_202_ACCEPTED)


class NodeViewSet(RestrictedQuerysetMixin, mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """Nodes mirrored from the clusters (read-only: the cluster is their source of truth)."""

    serializer_class = s.NodeSerializer
    filterset_class = NodeFilterSet
    ordering_fields = ["name", "status", "gpu_allocatable", "cpu_allocatable_millis", "memory_allocatable_bytes",
                       "created_in_cluster", "updated"]
    ordering = ["cluster__name", "name"]

    def base_queryset(self):
        return Node.objects.select_related("cluster", "pool")

    # The DCGM exporter's figures of the page's nodes (one Prometheus query per cluster, in the budget).
    def paginate_queryset(self, queryset):
        page = super().paginate_queryset(queryset)
        if page is not None:
            nodes = list(page)
            # Ready, allocated, free (nodepools.capacity) and how the GPUs are shared: two queries per page.
            selectors.nodes_attach_usage(nodes)
            selectors.nodes_attach_sharing(nodes)
            selectors.nodes_attach_gpu_metrics(nodes)
        return page

    def get_object(self):
        node = super().get_object()
        if self.action == "retrieve":
            selectors.nodes_attach_usage([node])
            selectors.nodes_attach_sharing([node])
            selectors.nodes_attach_gpu_metrics([node])
        return node

    @extend_schema(responses={200: s.NodeGpuDevicesSerializer,
                              404: OpenApiResponse(description="No such node you may see.")})
    @action(detail=True, methods=["get"], url_path="gpu-devices", pagination_class=None, filterset_class=None)
    def gpu_devices(self, request, pk=None):
        """The node's GPU devices as its cluster's DCGM exporter reports them (index, UUID, model, utilization,
        memory, graphics engine activity, the pod holding each), or why there are none
        (`gpu_devices_unavailable`): one Prometheus query, within GPUMETRICS_TIMEOUT."""
        node = self.get_object()
        devices, reason = selectors.node_gpu_device_list(node)
        return Response(s.NodeGpuDevicesSerializer({
            "node": node.pk, "name": node.name, "gpu_devices": devices, "gpu_devices_unavailable": reason or None,
        }).data)

    @extend_schema(
        request=s.NodeMoveSerializer,
        responses={
            202: OpenApiResponse(s.NodeSerializer, description="The cluster accepted the new labels; the node's pool "
                                 "changes here when the sync brings the change back."),
            400: OpenApiResponse(description="`errors.pool` says why (another cluster, or the cluster refused)."),
            403: OpenApiResponse(description="Only system administrators move nodes."),
        },
    )
    @action(detail=True, methods=["post"], url_path="move")
    def move(self, request, pk=None):
        """Move the node to a pool by setting that pool's label on the Node in its cluster."""
        node = self.get_object()
        form = s.NodeMoveSerializer(data=request.data, context=self.get_serializer_context())
        form.is_valid(raise_exception=True)
        services.node_move_to_pool(actor=request.user, node=node, pool=form.validated_data["pool"])
        return Response(s.NodeSerializer(node, context=self.get_serializer_context()).data, status=status.HTTP_202_ACCEPTED)
