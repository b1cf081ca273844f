"""Template helpers of the console's pages."""
from __future__ import annotations

from django import template
from django.utils.html import format_html
from django.utils.http import urlencode

from ui import formats, slots
from ui.formats import number

register = template.Library()


@register.simple_tag(takes_context=True)
def slot(context, name: str, obj=None) -> str:
    """The sections upper apps registered for this place of a lower app's page (ui/slots.py)."""
    return slots.render(name, context, obj)


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


@register.simple_tag(takes_context=True)
def table_url(context, table, **changes) -> str:
    """The current URL with this table's `sort`, `page` or `per_page` changed (named with the table's
    prefix); a new page size starts again at page 1."""
    request = context["request"]
    query = request.GET.copy()
    for key, value in changes.items():
        query[f"{table.prefix}{key}"] = str(value)
        if key == "per_page":
            query.pop(f"{table.prefix}page", None)
    return f"?{query.urlencode()}"


@register.simple_tag
def table_swap(url: str):
    """htmx attributes of a sort, page or page-size link: fetch the page's `#table` partial (not a
    boosted request, so the view answers with the partial) and put the URL in the address bar."""
    return format_html('hx-get="{}" hx-target="#table" hx-swap="outerHTML" hx-push-url="true"', url)


@register.filter
def num(value):
    """Decimal/float without trailing zeros; None as an em dash (unlimited)."""
    return number(value)


@register.filter
def joinlist(value, sep=", "):
    return sep.join(str(v) for v in value or [])


# Quantities in human units (ui/formats.py): GiB / TiB for bytes, cores for CPU.
@register.filter
def human_bytes(value):
    return formats.bytes_text(value)


@register.filter
def human_mib(value):
    return formats.mib_text(value)


@register.filter
def human_cores(value):
    return formats.cores_text(value)


@register.filter
def human_millicores(value):
    return formats.millicores_text(value)


@register.filter
def human_quantity(value, resource):
    """A parsed quantity of a Kubernetes resource (`{{ amount|human_quantity:"memory" }}`)."""
    return formats.quantity_text(resource, value)


@register.filter
def owner_label(obj, with_name: bool = True):
    """A department's or project's label, the one way pages show it: its display name with its Kubernetes
    name beside (`R&D <span class="k8s-name">rnd</span>`), or the name alone when it has no display name
    (or they are the same). `|owner_label:False`: the display name only (a title, a link in a sentence)."""
    if obj is None or obj == "":
        return ""
    name = getattr(obj, "name", None)
    if name is None:
        return str(obj)
    display = (getattr(obj, "display_name", "") or "").strip()
    if not display or display == name:
        return name
    if not with_name:
        return display
    return format_html('{} <span class="k8s-name" title="Kubernetes name">{}</span>', display, name)
