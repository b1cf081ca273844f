"""One FilterSet per model: the HTML tables, the CSV exports and the API filter through these.

Choice lists are restricted to what the requesting user may see, so a filter never leaks names.
"""
from __future__ import annotations

import django_filters
from django.core.exceptions import ValidationError
from django.db.models import Q

from common.parsing import other_digits

from nodepools.models import Cluster, ConnectionState, Node, NodePool, NodeStatus


def _user(request):
    return getattr(request, "user", None)


class _IdsField(django_filters.fields.ModelMultipleChoiceField):
    """Refuses ids that are not 64-bit integers before asking the database (which would fail with a 500)."""

    def _check_values(self, value):
        if (self.to_field_name or "pk") == "pk":
            for item in value:
                if other_digits(str(item)):
                    raise ValidationError(f"“{str(item)[:40]}” is not a valid id: write the digits 0-9.",
                                          code="invalid_pk_value")
                try:
                    number = int(str(item))
                except ValueError:
                    continue  # the field's own message ("… is not a valid value") follows
                if not -(2**63) <= number < 2**63:
                    raise ValidationError(f"“{item}” is not a valid id.", code="invalid_pk_value")
        return super()._check_values(value)


class ModelMultipleChoiceFilter(django_filters.ModelMultipleChoiceFilter):
    field_class = _IdsField


def visible_clusters(request):
    return Cluster.objects.restrict(_user(request), "view")


def visible_pools(request):
    return NodePool.objects.restrict(_user(request), "view").select_related("cluster")


class SearchMixin:
    search_fields: tuple[str, ...] = ()

    def search(self, queryset, name, value):
        if not value.strip():
            return queryset
        q = Q()
        for field in self.search_fields:
            q |= Q(**{f"{field}__icontains": value.strip()})
        return queryset.filter(q)


class ClusterFilterSet(SearchMixin, django_filters.FilterSet):
    search_fields = ("name", "description")
    q = django_filters.CharFilter(method="search", label="Search")
    connection_state = django_filters.MultipleChoiceFilter(choices=ConnectionState.choices)

    class Meta:
        model = Cluster
        fields = ["q", "connection_state"]


class NodePoolFilterSet(SearchMixin, django_filters.FilterSet):
    search_fields = ("name", "label_key", "label_value", "description")
    q = django_filters.CharFilter(method="search", label="Search")
    cluster = ModelMultipleChoiceFilter(queryset=visible_clusters)
    gpu_placement = django_filters.CharFilter()
    cpu_placement = django_filters.CharFilter()

    class Meta:
        model = NodePool
        fields = ["q", "cluster", "gpu_placement", "cpu_placement"]


class NodeFilterSet(SearchMixin, django_filters.FilterSet):
    search_fields = ("name", "gpu_product", "instance_type", "zone")
    q = django_filters.CharFilter(method="search", label="Search")
    cluster = ModelMultipleChoiceFilter(queryset=visible_clusters)
    pool = ModelMultipleChoiceFilter(queryset=visible_pools, label="Node pool")
    status = django_filters.MultipleChoiceFilter(choices=NodeStatus.choices)
    reason = django_filters.CharFilter(method="filter_reason", label="Not-ready reason")
    gpu_product = django_filters.CharFilter(label="GPU type")
    zone = django_filters.CharFilter()
    instance_type = django_filters.CharFilter()
    capacity_type = django_filters.CharFilter()

    class Meta:
        model = Node
        fields = ["q", "cluster", "pool", "status", "reason", "gpu_product", "zone", "instance_type", "capacity_type"]

    def filter_reason(self, queryset, name, value):
        # Reasons are few and short; a text match on the stored list works on SQLite and PostgreSQL.
        return queryset.filter(status_reasons__icontains=value) if value else queryset
