"""One helper renders every table page: FilterSet → restricted rows → table (or CSV, or the htmx partial).

The same FilterSet and the same sort serve the HTML table, its htmx refresh (`#table` partial) and
the CSV download, so what a user downloads is exactly what the page shows them.
"""
from __future__ import annotations

from typing import Any, Iterable

from django import forms
from django.shortcuts import render

from ui.tables import ConsoleTable, csv_response, table_build, wants_csv


class OneOfMany(forms.Select):
    """A single-choice dropdown ("All" first) feeding a multiple-choice filter (the API may pass many)."""

    allow_multiple_selected = False

    def value_from_datadict(self, data, files, name):
        return [v for v in data.getlist(name) if v] if hasattr(data, "getlist") else data.get(name)

    def format_value(self, value):
        if value is None:
            return []
        if not isinstance(value, (list, tuple)):
            value = [value]
        return [str(v) for v in value if v is not None]


def dropdowns(form: forms.Form, names: Iterable[str], extra: dict[str, list[str]] | None = None) -> None:
    """Turn multiple-choice filter fields into "All / one" dropdowns; `extra` makes text filters
    dropdowns of the given values (e.g. the GPU types present)."""
    for name in names:
        if name in form.fields:
            field = form.fields[name]
            field.widget = OneOfMany(choices=[("", "All")] + [(str(v), label) for v, label in field.choices])
    for name, values in (extra or {}).items():
        if name in form.fields:
            form.fields[name].widget = forms.Select(choices=[("", "All")] + [(v, v) for v in values if v])


def htmx_partial(request) -> bool:
    """Whether to answer with the page's `#table` partial: only for htmx's own requests (a sort, filter or
    page link, a live refetch), never for a boosted link a person follows, which gets the whole page (as
    in NetBox), nor for htmx restoring a page of its history it no longer holds (it swaps the answer
    into <body>)."""
    htmx = getattr(request, "htmx", None)
    return bool(htmx) and not htmx.boosted and not htmx.history_restore_request


def view_cluster_name(filterset) -> str | None:
    """The cluster a table's view is confined to, for the CSV's file name: the one its `cluster` filter
    names, else the only one the user may choose (the field's choices are restricted to what they see)."""
    if filterset is None or "cluster" not in filterset.form.fields:
        return None
    form = filterset.form
    chosen = form.cleaned_data.get("cluster") if filterset.is_bound and form.is_valid() else None
    if chosen is not None and not isinstance(chosen, (list, tuple)) and not hasattr(chosen, "model"):
        chosen = [chosen]
    chosen = list(chosen or [])
    if len(chosen) == 1:
        return getattr(chosen[0], "name", None)
    queryset = getattr(form.fields["cluster"], "queryset", None)
    if not chosen and queryset is not None:
        visible = list(queryset.order_by()[:2])
        if len(visible) == 1:
            return getattr(visible[0], "name", None)
    return None


def table_page(request, *, template: str, table_class: type[ConsoleTable], queryset, filterset_class=None,
               csv_name: str, context: dict[str, Any] | None = None, default_order: str | None = None,
               dropdown_fields: Iterable[str] = (), dropdown_values: dict[str, list[str]] | None = None,
               paginate: bool = True, table_kwargs: dict[str, Any] | None = None, rows_hook=None):
    """`rows_hook(queryset) -> rows`: turns the filtered rows into what the table shows (e.g. a list
    with usage attached, for small tables sorted in Python)."""
    filterset = None
    rows = queryset
    if filterset_class is not None:
        filterset = filterset_class(request.GET or None, queryset=queryset, request=request)
        # Before validation: the dropdowns read "All" (empty) as no filter.
        dropdowns(filterset.form, dropdown_fields, dropdown_values)
        rows = filterset.qs if filterset.is_bound and filterset.is_valid() else (
            queryset.none() if filterset.is_bound else queryset)
    if rows_hook is not None:
        rows = rows_hook(rows)
    if wants_csv(request):
        return csv_response(request, table_class, rows, filename=csv_name, default_order=default_order,
                            cluster=view_cluster_name(filterset), **(table_kwargs or {}))
    table = table_build(request, table_class, rows, default_order=default_order, paginate=paginate,
                        **(table_kwargs or {}))
    ctx = {"table": table, "filterset": filterset, "table_class": table_class,
           "column_choices": table_class.column_choices(request.user), "table_key": table_class.key}
    ctx.update(context or {})
    if htmx_partial(request):
        return render(request, f"{template}#table", ctx)
    return render(request, template, ctx)
