"""Usage history pages: the filterable history with its chart (columns chosen per user, CSV of the
current view), and the compliance CSV (every value, oldest first) for any date range."""
from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpResponse

from console.csv import csv_response
from ui.pages import table_page
from usage import selectors
from usage.filtersets import UsageSnapshotFilterSet
from usage.forms import range_errors
from usage.tables import UsageSnapshotTable


def _filtered(request):
    return UsageSnapshotFilterSet(request.GET or None, queryset=selectors.snapshot_list(user=request.user), request=request)


@login_required
def history(request):
    return table_page(
        request, template="usage/history.html", table_class=UsageSnapshotTable,
        queryset=selectors.snapshot_list(user=request.user), filterset_class=UsageSnapshotFilterSet,
        csv_name="usage-history", default_order="-taken",
        dropdown_fields=["kind", "cluster", "pool", "department", "project"],
    )


@login_required
def export(request):
    """Every row the user may see in the filtered range, oldest first, streamed; bad filters are a 400
    with the page's messages (never the whole history instead)."""
    filterset = _filtered(request)
    if filterset.is_bound and not filterset.is_valid():
        return HttpResponse(range_errors(filterset.form), status=400, content_type="text/plain; charset=utf-8")
    snapshots = filterset.qs.order_by("taken", "pool_id", "kind", "department_id", "project_id")
    return csv_response("usage-history.csv", selectors.CSV_HEADER, selectors.csv_rows(snapshots))
