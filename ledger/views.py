"""Pages of the ledger: monthly statements (department, cluster; printable, CSV), the hourly ledger (table,
CSV) and the rates (system administrators change them). Thin: reads through the selectors, restricted
to what the user may see (a 404 hides the rest); writes through the services."""
from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.db.models import Sum
from django.http import HttpResponse, StreamingHttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_http_methods

from access.rules import is_system_admin
from common.csv import csv_response
from common.exceptions import ConcurrentUpdate
from ledger import selectors, services
from ledger.charts import trend_figure
from ledger.filtersets import LedgerEntryFilterSet, RateFilterSet
from ledger.forms import RateForm
from ledger.models import LedgerDay, Rate
from ledger.tables import LedgerEntryTable, RateTable
from nodepools.models import Cluster
from projects.models import Department
from ui.charts import figure_table
from ui.pages import htmx_partial, table_page
from ui.tables import csv_filename, wants_csv
from ui.views import form_errors_from
from usage.forms import range_errors


def _month(request):
    """The month asked for (?month=YYYY-MM, default the current one) and the message when it is not one."""
    try:
        return selectors.Month.parse(request.GET.get("month")), ""
    except ValueError as exc:
        return selectors.Month.parse(None), str(exc)


def _statement_page(request, statement: selectors.Statement, *, csv_header, name: str, error: str):
    if wants_csv(request) and not error:
        response = csv_response(csv_filename(name, cluster=statement.cluster.name),
                                csv_header, selectors.statement_csv_rows(statement))
        response["Cache-Control"] = "no-store"
        return response
    figure = trend_figure(statement.days, subject=statement.title)
    context = {"statement": statement, "error": error, "figure": figure, "table": figure_table(figure),
               "previous": statement.month.previous(), "next": statement.month.next(),
               "can_cluster": Cluster.objects.restrict(request.user, "statement").filter(
                   pk=statement.cluster.pk).exists()}
    template = "ledger/statement.html#statement" if htmx_partial(request) else "ledger/statement.html"
    return render(request, template, context, status=400 if error else 200)


@login_required
def department_statement(request, pk: int):
    """A department's month: projects × pools × GPU models (only the rows the user may read)."""
    department = get_object_or_404(Department.objects.restrict(request.user, "view").select_related("cluster"), pk=pk)
    month, error = _month(request)
    statement = selectors.department_statement(user=request.user, department=department, month=month)
    return _statement_page(request, statement, csv_header=selectors.DEPARTMENT_CSV, error=error,
                           name=f"statement-{department.name}-{month}")


@login_required
def cluster_statement(request, pk: int):
    """A cluster's month, departments ranked by GPU-hours: for system administrators."""
    cluster = get_object_or_404(Cluster.objects.restrict(request.user, "statement"), pk=pk)
    month, error = _month(request)
    statement = selectors.cluster_statement(user=request.user, cluster=cluster, month=month)
    return _statement_page(request, statement, csv_header=selectors.CLUSTER_CSV, error=error,
                           name=f"statement-{month}")


@login_required
def statement_list(request):
    """The month's statements the user may open: each visible department (with its GPU-hours), and the
    cluster-wide ones for system administrators."""
    month, error = _month(request)
    departments = list(Department.objects.restrict(request.user, "view").select_related("cluster")
                       .order_by("cluster__name", "name"))
    sums = dict(LedgerDay.objects.restrict(request.user, "view").filter(
        department__in=[d.pk for d in departments], day__gte=month.first, day__lte=month.last).order_by()
        .values("department_id").annotate(s=Sum("gpu_seconds")).values_list("department_id", "s"))
    for department in departments:
        department.gpu_hours = selectors.hours(sums.get(department.pk))
    clusters = list(Cluster.objects.restrict(request.user, "statement"))
    return render(request, "ledger/statement_list.html", {
        "month": month, "error": error, "departments": departments, "clusters": clusters,
        "previous": month.previous(), "next": month.next()}, status=400 if error else 200)


# ---------------------------------------------------------------------------------------------------
# The hourly ledger

def _entries(request):
    return LedgerEntryFilterSet(request.GET or None, queryset=selectors.entry_list(user=request.user), request=request)


@login_required
def entries(request):
    return table_page(
        request, template="ledger/entries.html", table_class=LedgerEntryTable,
        queryset=selectors.entry_list(user=request.user), filterset_class=LedgerEntryFilterSet,
        csv_name="gpu-hours-ledger", default_order="-hour",
        dropdown_fields=["kind", "cluster", "pool", "department", "project"],
    )


@login_required
def export(request):
    """Every hourly row the user may see in the filtered range, oldest first, every figure, streamed."""
    filterset = _entries(request)
    if filterset.is_bound and not filterset.is_valid():
        return HttpResponse(range_errors(filterset.form), status=400, content_type="text/plain; charset=utf-8")
    response = StreamingHttpResponse(selectors.ledger_csv_lines(filterset.qs), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{csv_filename("gpu-hours-ledger")}"'
    response["Cache-Control"] = "no-store"
    return response


# ---------------------------------------------------------------------------------------------------
# Rates

def _can_change_rates(user) -> bool:
    return is_system_admin(user)


@login_required
def rates(request):
    return table_page(
        request, template="ledger/rates.html", table_class=RateTable, queryset=selectors.rate_list(user=request.user),
        filterset_class=RateFilterSet, csv_name="gpu-hour-rates", default_order="gpu_model",
        dropdown_fields=["pool"], context={"can_change": _can_change_rates(request.user)},
        table_kwargs={"can_change": _can_change_rates(request.user)},
    )


def _rate_values(form: RateForm) -> dict:
    return {name: form.cleaned_data.get(name) for name in services.RATE_FIELDS}


def _save(request, form, action, success: str):
    try:
        result = action()
    except ValidationError as exc:
        form_errors_from(form, exc)
        return None
    except ConcurrentUpdate as exc:
        form.add_error(None, str(exc))
        return None
    messages.success(request, success)
    return result


@login_required
@require_http_methods(["GET", "POST"])
def rate_create(request):
    if not _can_change_rates(request.user):
        raise PermissionDenied(services.NOT_ALLOWED)
    form = RateForm(request.POST or None, gpu_models=selectors.gpu_models(user=request.user),
                    currency=selectors.currency_in_use())
    if request.method == "POST" and form.is_valid():
        saved = _save(request, form, lambda: services.rate_create(actor=request.user, **_rate_values(form)),
                      "Rate saved.")
        if saved is not None:
            return redirect("rates")
    return render(request, "ledger/rate_form.html", {"form": form, "title": "Add a rate"})


@login_required
@require_http_methods(["GET", "POST"])
def rate_edit(request, pk: int):
    rate = get_object_or_404(selectors.rate_list(user=request.user), pk=pk)
    if not Rate.objects.restrict(request.user, "change").filter(pk=rate.pk).exists():
        raise PermissionDenied(services.NOT_ALLOWED)
    form = RateForm(request.POST or None, instance=Rate.objects.get(pk=rate.pk),
                    gpu_models=selectors.gpu_models(user=request.user))
    if request.method == "POST" and form.is_valid():
        saved = _save(request, form, lambda: services.rate_update(
            actor=request.user, rate=rate, expected_version=form.cleaned_data.get("version"), **_rate_values(form)),
            "Rate saved.")
        if saved is not None:
            return redirect("rates")
    return render(request, "ledger/rate_form.html", {"form": form, "title": f"Edit the rate of {rate.gpu_model}",
                                                     "rate": rate})


@login_required
@require_http_methods(["GET", "POST"])
def rate_delete(request, pk: int):
    rate = get_object_or_404(selectors.rate_list(user=request.user), pk=pk)
    if not Rate.objects.restrict(request.user, "delete").filter(pk=rate.pk).exists():
        raise PermissionDenied(services.NOT_ALLOWED)
    if request.method == "POST":
        services.rate_delete(actor=request.user, rate=rate)
        messages.success(request, f"Rate of {rate.gpu_model} from {rate.valid_from} deleted.")
        return redirect("rates")
    return render(request, "ledger/rate_delete.html", {"rate": rate})
