"""One FilterSet per model (pages, CSV and API); choice lists hold only what the user may see."""

from __future__ import annotations

import django_filters
from django.db.models import Q
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field

from nodepools.filtersets import ModelMultipleChoiceFilter, SearchMixin, visible_clusters, visible_pools
from projects.models import Project, ProjectNamespace
from ui.filters import YesNoFilter
from workloads.models import Platform, PodTemplate, ResourceValidationRuleSet, Workload


class PlatformFilterSet(SearchMixin, django_filters.FilterSet):
    search_fields = ("name", "description")
    q = django_filters.CharFilter(method="search", label="Search")
    cluster = ModelMultipleChoiceFilter(queryset=visible_clusters, field_name="pool__cluster")
    pool = ModelMultipleChoiceFilter(queryset=visible_pools, label="Node pool")

    class Meta:
        model = Platform
        fields = ["q", "cluster", "pool"]


class PodTemplateFilterSet(SearchMixin, django_filters.FilterSet):
    search_fields = ("name", "description")
    q = django_filters.CharFilter(method="search", label="Search")
    cluster = ModelMultipleChoiceFilter(queryset=visible_clusters)

    class Meta:
        model = PodTemplate
        fields = ["q", "cluster"]


class RuleSetFilterSet(SearchMixin, django_filters.FilterSet):
    search_fields = ("name", "description")
    q = django_filters.CharFilter(method="search", label="Search")
    cluster = ModelMultipleChoiceFilter(queryset=visible_clusters)

    class Meta:
        model = ResourceValidationRuleSet
        fields = ["q", "cluster"]


# ---------------------------------------------------------------------------------------------------
# Submission side (pool access, submitting, the workloads table)
PHASES = (("Pending", "Pending"), ("Suspended", "Suspended (queued)"), ("Running", "Running"),
          ("Succeeded", "Succeeded"), ("Failed", "Failed"))
PRIORITY_CLASSES = (("train", "train"), ("build-preemptible", "build-preemptible"), ("build", "build"),
                    ("inference", "inference"))


def visible_projects(request):
    return Project.objects.restrict(getattr(request, "user", None), "view").select_related("cluster")


class WorkloadFilterSet(SearchMixin, django_filters.FilterSet):
    search_fields = ("name", "namespace", "platform", "submitted_by")
    q = django_filters.CharFilter(method="search", label="Search")
    cluster = ModelMultipleChoiceFilter(queryset=visible_clusters)
    project = ModelMultipleChoiceFilter(queryset=visible_projects, method="filter_project", label="Project")
    pool = ModelMultipleChoiceFilter(queryset=visible_pools, method="filter_pool", label="Node pool")
    phase = django_filters.MultipleChoiceFilter(choices=PHASES, method="filter_phase")
    priority_class = django_filters.MultipleChoiceFilter(choices=PRIORITY_CLASSES)
    preemptible = YesNoFilter(method="filter_preemptible", label="Preemptible")

    class Meta:
        model = Workload
        fields = ["q", "cluster", "project", "pool", "phase", "priority_class", "preemptible"]

    @extend_schema_field(OpenApiTypes.INT)
    def filter_project(self, queryset, name, value):
        if not value:
            return queryset

        q = Q()
        for cluster_id, namespace in ProjectNamespace.objects.filter(project__in=value).values_list(
                "cluster_id", "name"):
            q |= Q(cluster_id=cluster_id, namespace=namespace)
        return queryset.filter(q) if q else queryset.none()

    @extend_schema_field(OpenApiTypes.INT)
    def filter_pool(self, queryset, name, value):
        """Workloads that tried the pool (its name in their list) or were placed in it."""
        if not value:
            return queryset
        q = Q()
        for pool in value:
            q |= Q(cluster_id=pool.cluster_id) & (Q(pools_tried__icontains=f'"{pool.name}"')
                                                  | Q(placed_pool=pool.name))
        return queryset.filter(q)

    def filter_phase(self, queryset, name, value):
        if not value:
            return queryset
        q = Q()
        for phase in value:
            if phase == "Running":
                q |= Q(running_pods__gt=0) & Q(phase__in=("Pending", "Running"))
            elif phase == "Pending":
                q |= Q(phase="Pending") & (Q(running_pods__isnull=True) | Q(running_pods=0))
            else:
                q |= Q(phase=phase)
        return queryset.filter(q)

    def filter_preemptible(self, queryset, name, value):
        if value is None:
            return queryset
        return queryset.filter(priority__lt=100) if value else queryset.filter(priority__gte=100)
