"""One FilterSet per model (pages, CSV and API); choice lists hold only what the user may see."""

from __future__ import annotations

from datetime import timedelta

import django_filters
from django.db.models.functions import Coalesce
from django.utils import timezone
from django.db.models import Q
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field

from nodepools.filtersets import ModelMultipleChoiceFilter, SearchMixin, visible_clusters, visible_pools
from projects.models import Project, ProjectNamespace
from ui.filters import YesNoFilter
from workloads.models import Platform, PodTemplate, ResourceValidationRuleSet, Workload
from workloads.selectors import HIDDEN_BY_DEFAULT


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
          ("Succeeded", "Succeeded (finished)"), ("Failed", "Failed"), ("Stopped", "Stopped"))
ENDED_CHOICES = (("hide", "hidden"), ("show", "shown"))
ENDED_SHOWN_FOR = timedelta(hours=1)  # how long a finished or stopped workload stays on the page by default
PRIORITY_CLASSES = (("train", "train"), ("build-preemptible", "build-preemptible"), ("build", "build"),
                    ("inference", "inference"))


def visible_projects(request):
    return Project.objects.restrict(getattr(request, "user", None), "view").select_related("cluster")


ORIGINS = (("console", "the console"), ("other", "not the console (other Jobs, controllers, bare pods)"))


class WorkloadFilterSet(SearchMixin, django_filters.FilterSet):
    search_fields = ("name", "namespace", "platform", "submitted_by")
    q = django_filters.CharFilter(method="search", label="Search")
    cluster = ModelMultipleChoiceFilter(queryset=visible_clusters)
    project = ModelMultipleChoiceFilter(queryset=visible_projects, method="filter_project", label="Project")
    pool = ModelMultipleChoiceFilter(queryset=visible_pools, method="filter_pool", label="Node pool")
    phase = django_filters.MultipleChoiceFilter(choices=PHASES, method="filter_phase")
    priority_class = django_filters.MultipleChoiceFilter(choices=PRIORITY_CLASSES)
    preemptible = YesNoFilter(method="filter_preemptible", label="Preemptible")
    # The workloads page hides finished and stopped workloads unless this says "shown" or a phase is chosen
    # (workloads.views.workload_list); the API lists them all unless it says "hidden".
    ended = django_filters.ChoiceFilter(choices=ENDED_CHOICES, method="filter_ended", label="Finished and stopped",
                                        empty_label="All")

    # Who made it: the console's submissions, or the Jobs and pods others made (bare pods, other controllers).
    origin = django_filters.ChoiceFilter(choices=ORIGINS, method="filter_origin", label="Submitted by",
                                         empty_label="Anyone")
    kind = django_filters.CharFilter(field_name="kind", label="Kind (Job, Pod, ReplicaSet, ...)")

    class Meta:
        model = Workload
        fields = ["q", "cluster", "project", "pool", "phase", "priority_class", "preemptible", "ended", "origin",
                  "kind"]

    def filter_origin(self, queryset, name, value):
        if value == "console":
            return queryset.filter(by_console=True)
        if value == "other":
            return queryset.filter(by_console=False)
        return queryset

    ended_default = ""  # the API: all of them

    def filter_ended(self, queryset, name, value):
        return queryset  # (filter_queryset applies it, with the default)

    def filter_queryset(self, queryset):
        queryset = super().filter_queryset(queryset)
        return ended_filtered(queryset, self.form.cleaned_data.get("ended") or self.ended_default,
                              phase_chosen=bool(self.form.cleaned_data.get("phase")))

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


def ended_filtered(queryset, ended: str, *, phase_chosen: bool = False):
    """Without the finished and stopped workloads when `ended` is "hide" and no phase was chosen: those that
    ended within the last ENDED_SHOWN_FOR stay (who just stopped one sees it Stopped)."""
    if ended != "hide" or phase_chosen:
        return queryset
    since = timezone.now() - ENDED_SHOWN_FOR
    return queryset.annotate(ended_at=Coalesce("gone_at", "finished_at", "updated")).exclude(
        phase__in=HIDDEN_BY_DEFAULT, ended_at__lt=since)


class WorkloadPageFilterSet(WorkloadFilterSet):
    """The workloads page's: finished and stopped workloads hidden unless asked for."""

    ended_default = "hide"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        field = self.form.fields["ended"]
        field.empty_label = "hidden after an hour"
        field.choices = [("show", "shown")]
