import django_filters

from audit.context import CHANNELS
from audit.models import AuditEvent


class AuditEventFilterSet(django_filters.FilterSet):
    when = django_filters.IsoDateTimeFromToRangeFilter()
    actor = django_filters.CharFilter(field_name="actor_name", lookup_expr="icontains")
    via = django_filters.MultipleChoiceFilter(choices=[(c, c) for c in CHANNELS])
    action = django_filters.MultipleChoiceFilter(choices=AuditEvent.Action.choices)
    object_type = django_filters.CharFilter()
    object_id = django_filters.CharFilter()
    # Bounded: an id beyond 64 bits is a 400, not a database error.
    cluster = django_filters.NumberFilter(field_name="cluster_id", min_value=0, max_value=2**63 - 1)
    department = django_filters.NumberFilter(field_name="department_id", min_value=0, max_value=2**63 - 1)

    class Meta:
        model = AuditEvent
        fields = ["when", "actor", "via", "action", "object_type", "object_id", "cluster", "department"]
