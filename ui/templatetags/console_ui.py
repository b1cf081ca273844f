"""Template helpers of the console's pages."""
from __future__ import annotations

from django import template
from django.utils.html import format_html
from django.utils.http import urlencode

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


@register.simple_tag(takes_context=True)
def console_nav(context):
    """The clusters the user may see and the current one (for the switcher and the quota link), and
    whether the user may read the audit trail (the same access rule as the audit pages)."""
    request = context["request"]
    from audit.selectors import user_may_read_audit
    from nodepools.selectors import cluster_list

    clusters = list(cluster_list(user=request.user).only("pk", "name"))
    current = request.session.get("console.cluster")
    if current not in [c.pk for c in clusters]:
        current = clusters[0].pk if clusters else None
    return {"clusters": clusters, "current": current, "audit": user_may_read_audit(request.user)}


@register.filter
def num(value):
    """Decimal/float without trailing zeros; None as an em dash (unlimited)."""
    from nodepools.tables import _num

    return _num(value)


@register.filter
def joinlist(value, sep=", "):
    return sep.join(str(v) for v in value or [])
