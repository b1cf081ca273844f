"""Template helpers of the console's pages."""
from __future__ import annotations

from django import template
from django.utils.http import urlencode

from ui.formats import number

register = template.Library()


@register.simple_tag(takes_context=True)
def csv_url(context, all_columns: bool = False, prefix: str = "") -> str:
    """The current view's URL (filters, sort) as a CSV download; `all_columns` for every column."""
    request = context["request"]
    params = [(k, v) for k in request.GET for v in request.GET.getlist(k)
              if k not in ("format", "columns", f"{prefix}page", f"{prefix}per_page")]
    params.append(("format", "csv"))
    if all_columns:
        params.append(("columns", "all"))
    return f"{request.path}?{urlencode(params)}"


@register.filter
def num(value):
    """Decimal/float without trailing zeros; None as an em dash (unlimited)."""
    return number(value)


@register.filter
def joinlist(value, sep=", "):
    return sep.join(str(v) for v in value or [])
