"""Usage history pages: the filterable history with its chart, and the compliance CSV for any date range."""
from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.shortcuts import render
from django_tables2 import RequestConfig

from console.csv import csv_response
from usage import selectors
from usage.filtersets import UsageSnapshotFilterSet
from usage.tables import UsageSnapshotTable


def _filtered(request):
    return UsageSnapshotFilterSet(request.GET or None, queryset=selectors.snapshot_list(user=request.user), request=request)


@login_required
def history(request):
    filterset = _filtered(request)
    table = UsageSnapshotTable(filterset.qs)
    RequestConfig(request, paginate={"per_page": 100}).configure(table)
    template = "usage/history.html#table" if request.htmx else "usage/history.html"
    return render(request, template, {"filter": filterset, "table": table, "query": request.GET.urlencode()})


@login_required
def export(request):
    """Every row the user may see in the filtered range, oldest first, streamed."""
    snapshots = _filtered(request).qs.order_by("taken", "pool_id", "kind", "department_id", "project_id")
    return csv_response("usage-history.csv", selectors.CSV_HEADER, selectors.csv_rows(snapshots))
