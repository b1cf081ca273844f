"""The one FilterSet of usage history: the page, its CSV export and the API filter through it."""
from __future__ import annotations

import django_filters
from django.db.models import Q

from common.fields import DateFilter, IsoDateTimeFromToRangeFilter
from common.parsing import day_after, day_start
from nodepools.filtersets import ModelMultipleChoiceFilter, visible_clusters, visible_pools
from projects.filtersets import visible_departments, visible_projects
from usage.forms import UsageFilterForm
from usage.models import UsageSnapshot


class UsageSnapshotFilterSet(django_filters.FilterSet):
    date_from = DateFilter(method="filter_from", label="From (date, UTC)")
    date_to = DateFilter(method="filter_to", label="To (date, UTC, inclusive)")
    taken = IsoDateTimeFromToRangeFilter(label="Taken (time range)")
    kind = django_filters.MultipleChoiceFilter(choices=[(k.label.lower(), k.label) for k in UsageSnapshot.Kind],
                                               method="filter_kind")
    cluster = ModelMultipleChoiceFilter(queryset=visible_clusters, method="filter_cluster", label="Cluster")
    pool = ModelMultipleChoiceFilter(queryset=visible_pools, label="Node pool")
    department = ModelMultipleChoiceFilter(queryset=visible_departments,
                                                          label="Department (and its projects)")
    project = ModelMultipleChoiceFilter(queryset=visible_projects)

    class Meta:
        model = UsageSnapshot
        form = UsageFilterForm
        fields = ["date_from", "date_to", "taken", "kind", "cluster", "pool", "department", "project"]

    # Ranges on the indexed timestamp (not on its date), so that long histories stay fast.
    def filter_from(self, queryset, name, value):
        return queryset.filter(taken__gte=day_start(value))

    def filter_to(self, queryset, name, value):
        end = day_after(value)  # None: the calendar's last day, a range without end
        return queryset if end is None else queryset.filter(taken__lt=end)

    def filter_kind(self, queryset, name, value):
        kinds = {k.label.lower(): k.value for k in UsageSnapshot.Kind}
        return queryset.filter(kind__in=[kinds[v] for v in value]) if value else queryset

    def filter_cluster(self, queryset, name, value: int):  # (the hint types the API parameter)
        return queryset.filter(cluster_id__in=[c.pk for c in value]) if value else queryset

class IdleGpuFilterSet(django_filters.FilterSet):
    """The one FilterSet of idle allocated GPUs (the page, its CSV): it filters the pods that hold them
    (already restricted to what the user may see) before Prometheus' answer is joined to them."""

    q = django_filters.CharFilter(method="filter_q", label="Search (pod, namespace)")
    cluster = ModelMultipleChoiceFilter(queryset=visible_clusters, method="filter_cluster", label="Cluster")
    pool = ModelMultipleChoiceFilter(queryset=visible_pools, method="filter_pool", label="Node pool")
    department = ModelMultipleChoiceFilter(queryset=visible_departments, method="filter_department",
                                           label="Department")
    project = ModelMultipleChoiceFilter(queryset=visible_projects, method="filter_project", label="Project")

    class Meta:
        fields = ["q", "cluster", "pool", "department", "project"]

    def filter_q(self, queryset, name, value):
        value = (value or "").strip()
        return queryset.filter(Q(name__icontains=value) | Q(namespace__icontains=value)) if value else queryset

    def filter_cluster(self, queryset, name, value):
        return queryset.filter(cluster_id__in=[c.pk for c in value]) if value else queryset

    def filter_pool(self, queryset, name, value):
        return queryset.filter(node__pool_id__in=[p.pk for p in value]) if value else queryset

    def filter_department(self, queryset, name, value):
        return queryset.filter(project__department_id__in=[d.pk for d in value]) if value else queryset

    def filter_project(self, queryset, name, value):
        return queryset.filter(project_id__in=[p.pk for p in value]) if value else queryset
