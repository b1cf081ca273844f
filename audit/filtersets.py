"""The one FilterSet of the audit trail (page, CSV and API): people, clusters, departments and objects
by name, never by numeric id.

Cluster and department names come from the trail itself (the snapshots of their own create / update /
delete events), so that an event stays findable by name after its cluster or department is gone, and
so that this low app needs nothing from the apps above it.
"""
from __future__ import annotations

from typing import Any

import django_filters

from audit.context import CHANNELS
from audit.models import AuditEvent
from common.fields import IsoDateTimeFromToRangeFilter

OBJECT_TYPES = ["cluster", "nodepool", "node", "department", "project", "quota", "priorityentry", "roleassignment",
                "apitoken"]


def scope_names(events, object_type: str) -> dict[str, set[int]]:
    """{name: ids} of the clusters or departments named in the visible trail (every name they had)."""
    names: dict[str, set[int]] = {}
    rows = events.filter(object_type=object_type).values_list("object_id", "before__name", "after__name")
    for object_id, before, after in rows.order_by():
        for name in (before, after):
            if isinstance(name, str) and name and str(object_id).isdigit():
                names.setdefault(name, set()).add(int(object_id))
    return names


class AuditEventFilterSet(django_filters.FilterSet):
    when = IsoDateTimeFromToRangeFilter(label="When (time range)")
    actor = django_filters.CharFilter(field_name="actor_name", lookup_expr="icontains", label="Actor (username)")
    via = django_filters.MultipleChoiceFilter(choices=[(c, c) for c in CHANNELS], label="Through")
    action = django_filters.MultipleChoiceFilter(choices=AuditEvent.Action.choices)
    object_type = django_filters.ChoiceFilter(label="Object type", method="filter_object_type", empty_label="All")
    object = django_filters.CharFilter(field_name="object_repr", lookup_expr="icontains", label="Object (name)")
    cluster = django_filters.ChoiceFilter(label="Cluster", method="filter_cluster", empty_label="All")
    department = django_filters.ChoiceFilter(label="Department", method="filter_department", empty_label="All")

    class Meta:
        model = AuditEvent
        fields = ["when", "actor", "via", "action", "object_type", "object", "cluster", "department"]

    def __init__(self, data=None, queryset=None, *, request=None, **kwargs):
        super().__init__(data, queryset=queryset, request=request, **kwargs)
        base = self.queryset if self.queryset is not None else AuditEvent.objects.none()
        self._names = {"cluster": scope_names(base, "cluster"), "department": scope_names(base, "department")}
        for name in ("cluster", "department"):
            self.filters[name].extra["choices"] = [(n, n) for n in sorted(self._names[name])]
        # Every audited type (an API client may ask for one with no events yet), and any other in the trail.
        present = set(base.order_by().values_list("object_type", flat=True).distinct())
        self.filters["object_type"].extra["choices"] = [(t, t) for t in OBJECT_TYPES + sorted(present - set(OBJECT_TYPES))]

    def filter_object_type(self, queryset, name, value: str):
        return queryset.filter(object_type=value) if value else queryset

    def filter_cluster(self, queryset, name, value: str):
        if not value:
            return queryset
        # A cluster's own events and those of everything in it carry its id.
        return queryset.filter(cluster_id__in=self._names["cluster"].get(value, set()))

    def filter_department(self, queryset, name, value: str):
        return queryset.filter(department_id__in=self._names["department"].get(value, set())) if value else queryset


def describe(filterset: Any) -> str:
    """The form's errors as lines "Field: message" (a 400 answer of the CSV download)."""
    form = filterset.form
    return "\n".join(f"{form.fields[n].label if n in form.fields else n}: {e}" for n, es in form.errors.items() for e in es)
