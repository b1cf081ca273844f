"""Usage history pages: the filterable history with its chart (columns chosen per user, CSV of the
current view), and the compliance CSV (every value, oldest first) for any date range."""
from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpResponse

from common.csv import csv_response
from projects.utilization import idle_threshold, idle_window
from ui.pages import table_page
from usage import selectors
from usage.filtersets import IdleGpuFilterSet, UsageSnapshotFilterSet
from usage.forms import range_errors
from usage.tables import IdleGpuTable, UsageSnapshotTable


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


@login_required
def idle_gpus(request):
    """Allocated GPUs whose utilization stayed under the threshold for the window, by project, with
    since-when and GPU-hours wasted; the CSV is the same view."""
    found: dict = {}

    def rows_hook(pods):
        rows, reasons = selectors.idle_gpu_rows(pods)
        found.update(rows=rows, reasons=reasons)
        return rows

    window = idle_window()
    return table_page(
        request, template="usage/idle_gpus.html", table_class=IdleGpuTable,
        queryset=selectors.idle_gpu_pods(user=request.user), filterset_class=IdleGpuFilterSet,
        csv_name="idle-gpus", dropdown_fields=["cluster", "pool", "department", "project"], rows_hook=rows_hook,
        context={"found": found, "threshold": idle_threshold(), "window_minutes": int(window.total_seconds() // 60),
                 "summary": lambda: selectors.idle_summary(found.get("rows", []))},
    )
