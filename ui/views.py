"""The column chooser of every table (one POST view; the tables register here by their key)."""
from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import Http404
from django.shortcuts import redirect
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST

from common.fields import plain_errors
from ui import services

REGISTRY: dict[str, type] = {}


def register(table_class):
    """Class decorator: make a table's columns choosable (by its `key`)."""
    REGISTRY[table_class.key] = table_class
    return table_class


def _back(request, fallback: str = "/"):
    target = request.POST.get("next") or request.GET.get("next") or ""
    if url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()}, require_https=request.is_secure()):
        return target
    return fallback


@login_required
@require_POST
def table_columns(request, table: str):
    """Save the chosen columns in the posted order; `move=up:name` / `move=down:name` reorders one;
    `reset` returns to the defaults. Works as a plain form (no JavaScript needed)."""
    table_class = REGISTRY.get(table)
    if table_class is None:
        raise Http404("No such table.")
    if "reset" in request.POST:
        services.table_preference_reset(user=request.user, table=table)
        return redirect(_back(request))
    order = request.POST.getlist("order") or table_class.column_names()
    shown = set(request.POST.getlist("columns"))
    columns = [name for name in order if name in shown]
    move = request.POST.get("move", "")
    if ":" in move:
        direction, name = move.split(":", 1)
        if name in columns:
            i = columns.index(name)
            j = i - 1 if direction == "up" else i + 1
            if 0 <= j < len(columns):
                columns[i], columns[j] = columns[j], columns[i]
    try:
        services.table_preference_set(user=request.user, table=table, columns=columns,
                                      allowed=table_class.column_names())
    except ValidationError as exc:
        for message in exc.message_dict.get("columns", exc.messages):
            messages.error(request, message)
    return redirect(_back(request))


def form_errors_from(form, exc: ValidationError) -> None:
    """Put a service's ValidationError on the form: on the field it names, else on the whole form (the
    model's numeric limits in words: common.fields.plain_errors)."""
    exc = plain_errors(exc)
    if hasattr(exc, "error_dict"):
        for name, errors in exc.message_dict.items():
            name = getattr(form, "SERVICE_FIELDS", {}).get(name, name)  # the form's name of a service's field
            target = name if name in form.fields else None
            for message in errors:
                form.add_error(target, message if target else (f"{name}: {message}" if name != "__all__" else message))
    else:
        for message in exc.messages:
            form.add_error(None, message)
