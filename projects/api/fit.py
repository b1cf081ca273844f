"""Will it fit? over the API (reads): a pool's fragmentation and what would make room for a shape, and the
compact figures of every pool of a cluster. Serializers describe `projects.fit`'s answers."""
from __future__ import annotations

from django.shortcuts import get_object_or_404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import generics, serializers
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response

from common.fields import StrictDecimalField, StrictIntegerField
from nodepools.models import Cluster, NodePool
from projects import selectors

GPUS = dict(max_digits=14, decimal_places=3)


class PodsOfSizeSerializer(serializers.Serializer):
    gpus_per_pod = StrictIntegerField()
    pods = StrictIntegerField(help_text="Pods of this many GPUs that fit now, each on one node.")
    gpus_stranded = StrictDecimalField(**GPUS, help_text="Free GPUs no such pod can use (scattered).")


class GangSerializer(serializers.Serializer):
    gpus_per_pod = StrictIntegerField()
    pods = StrictIntegerField(help_text="The largest gang of such pods that fits in the pool now.")
    pods_in_one_domain = StrictIntegerField(help_text="The largest inside one topology domain.")
    domain = serializers.CharField(allow_null=True, help_text="That domain (the topology label's value).")


class HistogramSerializer(serializers.Serializer):
    free_gpus = StrictIntegerField()
    nodes = StrictIntegerField()


class DomainPodsSerializer(serializers.Serializer):
    gpus_per_pod = StrictIntegerField()
    pods = StrictIntegerField()


class DomainSerializer(serializers.Serializer):
    name = serializers.CharField()
    nodes = StrictIntegerField()
    gpus_free = StrictDecimalField(**GPUS)
    pods_that_fit = DomainPodsSerializer(many=True)


class SlicePodsSerializer(serializers.Serializer):
    slices_per_pod = StrictIntegerField()
    pods = StrictIntegerField(help_text="Pods of this many slices of the profile that fit now, each on one node "
                                        "(all at once, for a gang).")
    slices_stranded = StrictIntegerField(help_text="Free slices no such pod can use (scattered over nodes).")


class SliceGangSerializer(serializers.Serializer):
    slices_per_pod = StrictIntegerField()
    pods = StrictIntegerField(help_text="The largest gang of such pods that fits in the pool now.")
    pods_in_one_domain = StrictIntegerField(help_text="The largest inside one topology domain.")
    domain = serializers.CharField(allow_null=True)


class SliceHistogramSerializer(serializers.Serializer):
    free_slices = StrictIntegerField()
    nodes = StrictIntegerField()


class MigSlicesFitSerializer(serializers.Serializer):
    profile = serializers.CharField()
    share = StrictDecimalField(max_digits=6, decimal_places=3, help_text="One slice in GPU-equivalents.")
    nodes = StrictIntegerField(help_text="Ready, schedulable nodes publishing the profile.")
    nodes_publishing = StrictIntegerField(help_text="Nodes publishing it, Ready or not.")
    slices = StrictIntegerField(help_text="Allocatable slices on those Ready nodes.")
    slices_free = StrictIntegerField(help_text="Free slices on them: how many pods of one slice fit now (the pool "
                                               "page's MIG slices, Free).")
    most_free_on_a_node = StrictIntegerField()
    pods_that_fit = SlicePodsSerializer(many=True)
    largest_gang = SliceGangSerializer(many=True)
    free_slices_histogram = SliceHistogramSerializer(many=True)
    summary = serializers.CharField(help_text="The fragmentation in slices, in words.")


class FragmentationSerializer(serializers.Serializer):
    nodes = StrictIntegerField(help_text="Ready, schedulable GPU nodes.")
    gpus = StrictIntegerField(help_text="Their allocatable GPUs.")
    gpus_free = StrictDecimalField(**GPUS)
    largest_free_on_a_node = StrictDecimalField(**GPUS)
    pods_that_fit = PodsOfSizeSerializer(many=True)
    largest_gang = GangSerializer(many=True)
    free_gpus_histogram = HistogramSerializer(many=True, help_text="How many nodes have each number of free GPUs.")
    topology_key = serializers.CharField()
    domains = DomainSerializer(many=True)
    nodes_without_topology_label = StrictIntegerField()
    summary = serializers.CharField()
    mig_slices = MigSlicesFitSerializer(many=True, help_text=(
        "Per MIG profile, counted in its slices: a slice serves only a pod asking that profile, on a node publishing "
        "it (never a whole GPU, nor a slice of another profile); the GPU figures above count GPU-equivalents, "
        "the pods of 1, 2, 4 and 8 GPUs whole GPUs only."))


class VictimSerializer(serializers.Serializer):
    action = serializers.ChoiceField(choices=["reclaim", "preempt"])
    namespace = serializers.CharField(allow_null=True, help_text="Null when you may not see its project.")
    pod = serializers.CharField(allow_null=True)
    workload = serializers.CharField(allow_null=True)
    node = serializers.CharField(allow_null=True)
    gpus = StrictDecimalField(**GPUS)
    priority = StrictIntegerField()
    project = serializers.CharField()
    department = serializers.CharField()


class OwnerTakenSerializer(serializers.Serializer):
    project = serializers.CharField()
    department = serializers.CharField()
    gpus = StrictDecimalField(**GPUS)
    pods = StrictIntegerField()


class RoomSerializer(serializers.Serializer):
    pods = StrictIntegerField()
    gpus_per_pod = StrictIntegerField(allow_null=True, help_text="Null for a MIG profile (slices_per_pod).")
    gpu_equivalents_per_pod = StrictDecimalField(**GPUS)
    mig_profile = serializers.CharField(allow_null=True)
    slices_per_pod = StrictIntegerField(allow_null=True)
    fits = serializers.BooleanField(help_text="Whether the scheduler's rules can make room for the shape.")
    never = serializers.BooleanField(help_text="No node of the pool could hold one pod of the shape even empty: "
                                               "nothing can make room (no victim is listed).")
    domain = serializers.CharField(allow_null=True)
    gpus_taken = StrictDecimalField(**GPUS)
    victims = VictimSerializer(many=True)
    by_owner = OwnerTakenSerializer(many=True)
    explanation = serializers.CharField()


class PoolFitSerializer(serializers.Serializer):
    pool = serializers.CharField()
    pool_id = StrictIntegerField()
    fragmentation = FragmentationSerializer()
    room = RoomSerializer(allow_null=True, help_text="For ?pods=&gpus=: what would make room for that shape.")


def pool_fit_body(pool: NodePool, result) -> dict:
    return {"pool": pool.name, "pool_id": pool.pk, "fragmentation": result.fragmentation.as_dict(),
            "room": result.room.as_dict() if result.room is not None else None}


SHAPE = [
    OpenApiParameter("pods", OpenApiTypes.INT, description="Pods of the shape to make room for (1-1000)."),
    OpenApiParameter("gpus", OpenApiTypes.INT, description="GPUs per pod of that shape (1-64); with profile, MIG "
                     "slices of it per pod."),
    OpenApiParameter("profile", OpenApiTypes.STR, description="A MIG profile (e.g. 3g.40gb): make room for pods of "
                     "its slices (only pods holding slices of it give room)."),
    OpenApiParameter("domain", OpenApiTypes.STR, description="Only inside this topology domain."),
]


class PoolFitView(generics.GenericAPIView):
    """A pool's fragmentation: pods of 1, 2, 4 and 8 GPUs that fit now (each on one node), the largest gang in
    the pool and inside one topology domain, the free GPUs per node as a histogram; per MIG profile the same
    in slices of it; with `pods` and `gpus` (and `profile`), the preemptible pods the scheduler's rules would
    take to make room for that shape, and whose they are."""

    serializer_class = PoolFitSerializer
    pagination_class = None
    queryset = NodePool.objects.none()

    @extend_schema(parameters=SHAPE)
    def get(self, request, pk: int):
        pool = get_object_or_404(NodePool.objects.restrict(request.user, "view"), pk=pk)
        shape, errors = selectors.fit_shape(request.query_params)
        if errors:
            raise ValidationError({name: [error] for name, error in errors.items()})
        result = selectors.pool_fit(user=request.user, pool=pool, shape=shape,
                                    domain=str(request.query_params.get("domain") or "")[:253])
        return Response(PoolFitSerializer(pool_fit_body(pool, result)).data)


class ClusterFitSerializer(serializers.Serializer):
    cluster = serializers.CharField()
    pools = PoolFitSerializer(many=True)


class ClusterFitView(generics.GenericAPIView):
    """Every pool of the cluster you may see with its fragmentation (the overview's compact line per pool)."""

    serializer_class = ClusterFitSerializer
    pagination_class = None
    queryset = Cluster.objects.none()

    def get(self, request, pk: int):
        cluster = get_object_or_404(Cluster.objects.restrict(request.user, "view"), pk=pk)
        pools = selectors.pools_attach_fit(list(NodePool.objects.restrict(request.user, "view").filter(cluster=cluster)))
        body = {"cluster": cluster.name, "pools": [
            {"pool": p.name, "pool_id": p.pk, "fragmentation": p.fit.as_dict(), "room": None} for p in pools]}
        return Response(ClusterFitSerializer(body).data)
