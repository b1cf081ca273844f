"""The one FilterSet of each ledger model: the page, its CSV and the API filter through it."""
from __future__ import annotations

import django_filters

from common.fields import DateFilter
from common.parsing import day_after, day_start
from ledger.models import Kind, LedgerEntry, Rate
from nodepools.filtersets import ModelMultipleChoiceFilter, visible_clusters, visible_pools
from projects.filtersets import visible_departments, visible_projects
from usage.forms import UsageFilterForm


class LedgerEntryFilterSet(django_filters.FilterSet):
    date_from = DateFilter(method="filter_from", label="From (date, UTC)")
    date_to = DateFilter(method="filter_to", label="To (date, UTC, inclusive)")
    kind = django_filters.MultipleChoiceFilter(choices=[("closing", "Hour closed"), ("correction", "Correction")],
                                               method="filter_kind", label="Kind")
    cluster = ModelMultipleChoiceFilter(queryset=visible_clusters, method="filter_cluster", label="Cluster")
    pool = ModelMultipleChoiceFilter(queryset=visible_pools, label="Node pool")
    gpu_model = django_filters.CharFilter(label="GPU model")
    department = ModelMultipleChoiceFilter(queryset=visible_departments, label="Department")
    project = ModelMultipleChoiceFilter(queryset=visible_projects)

    class Meta:
        model = LedgerEntry
        form = UsageFilterForm  # its rule: a date range runs forwards
        fields = ["date_from", "date_to", "kind", "cluster", "pool", "gpu_model", "department", "project"]

    # Ranges on the indexed hour (not on its date), so that a year of rows stays fast.
    def filter_from(self, queryset, name, value):
        return queryset.filter(hour__gte=day_start(value))

    def filter_to(self, queryset, name, value):
        end = day_after(value)  # None: the calendar's last day, a range without end
        return queryset if end is None else queryset.filter(hour__lt=end)

    def filter_kind(self, queryset, name, value):
        kinds = {"closing": Kind.CLOSING, "correction": Kind.CORRECTION}
        return queryset.filter(kind__in=[kinds[v] for v in value]) if value else queryset

    def filter_cluster(self, queryset, name, value: int):  # (the hint types the API parameter)
        return queryset.filter(cluster_id__in=[c.pk for c in value]) if value else queryset


class RateFilterSet(django_filters.FilterSet):
    gpu_model = django_filters.CharFilter(label="GPU model", lookup_expr="icontains")
    pool = ModelMultipleChoiceFilter(queryset=visible_pools, label="Node pool")

    class Meta:
        model = Rate
        fields = ["gpu_model", "pool"]
