"""Pages of the audit trail: the filterable list (columns chosen per user, CSV of the current view),
one event's before/after, and the complete CSV of the filtered trail."""
from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, render

from audit import selectors
from audit.filtersets import AuditEventFilterSet, describe
from audit.tables import AuditEventTable
from common.csv import csv_response
from ui.pages import table_page


def _require_reader(user) -> None:
    if not selectors.user_may_read_audit(user):
        raise PermissionDenied("Only system and department administrators may read the audit trail.")


def _filtered(request):
    return AuditEventFilterSet(request.GET or None, queryset=selectors.audit_event_list(user=request.user), request=request)


@login_required
def event_list(request):
    _require_reader(request.user)
    return table_page(
        request, template="audit/event_list.html", table_class=AuditEventTable,
        queryset=selectors.audit_event_list(user=request.user), filterset_class=AuditEventFilterSet,
        csv_name="audit-events", default_order="-when", dropdown_fields=["via", "action"],
    )


@login_required
def event_detail(request, pk: int):
    _require_reader(request.user)
    event = get_object_or_404(selectors.audit_event_list(user=request.user), pk=pk)
    before, after = event.before or {}, event.after or {}
    fields = [
        {"name": key, "before": before.get(key), "after": after.get(key), "changed": before.get(key) != after.get(key)}
        for key in sorted(set(before) | set(after))
    ]
    return render(request, "audit/event_detail.html", {"event": event, "fields": fields})


@login_required
def event_export(request):
    """Every field of every filtered event (the API's format), whatever columns the page shows."""
    _require_reader(request.user)
    filterset = _filtered(request)
    if filterset.is_bound and not filterset.is_valid():  # never the whole trail instead
        return HttpResponse(describe(filterset), status=400, content_type="text/plain; charset=utf-8")
    events = filterset.qs
    return csv_response("audit-events.csv", selectors.CSV_HEADER, selectors.audit_csv_rows(events))
