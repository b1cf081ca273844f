import datetime

from django import template

from common.parsing import InputError, day_after, day_start, parse_date
from ui.charts import figure_table
from usage import selectors
from usage.charts import usage_figure

register = template.Library()


def _date(value) -> datetime.date | None:
    """A date of the page's filter (a date or its ISO text); None when there is none or it is not one
    (the filter's form says why)."""
    if isinstance(value, str):
        try:
            return parse_date(value, field="date")
        except InputError:
            return None
    if isinstance(value, datetime.datetime):
        return value.date()
    return value if isinstance(value, datetime.date) else None


@register.inclusion_tag("ui/_chart.html", takes_context=True)
def usage_chart(context, pool=None, department=None, days=7, date_from=None, date_to=None):
    """GPU usage of a pool, a department, or (neither) every pool the user may see: over the last `days`,
    or over the dates chosen (`date_from`, `date_to` inclusive; the usage page's filter)."""
    request = context.get("request")
    user = getattr(request, "user", None)
    pool = pool or None  # an unset template variable arrives as ""
    department = department or None
    try:
        days = max(1, min(int(days), 366))
    except (TypeError, ValueError):
        days = 7
    first, last = _date(date_from), _date(date_to)
    start = day_start(first) if first is not None else None
    # The last day chosen is included; on the calendar's last day the range has no end (up to now).
    end = day_after(last) if last is not None else None
    if start is not None and end is not None and start >= end:
        start = end = None  # a range running backwards is the filter's error to show; chart the default
    points = selectors.gpu_series(user=user, pool=pool, department=department, days=days, start=start,
                                  end=end) if user else []
    subject = f"node pool {pool}" if pool else f"department {department}" if department else "all node pools you may see"
    figure = usage_figure(points, subject=subject, days=days, start=start, end=end)
    return {"figure": figure, "table": figure_table(figure), "chart_id": "usage-chart",
            "empty": figure["empty"] if not points else ""}


# The usage sections on the pages of projects, which never names this app: the places its templates name,
# filled in UsageConfig.ready() (ui/slots.py).

@register.inclusion_tag("ui/_chart.html", takes_context=True)
def pool_usage_chart(context, pool):
    """A pool's page: its GPU usage over the last 7 days."""
    return usage_chart(context, pool=pool)


@register.inclusion_tag("ui/_chart.html", takes_context=True)
def department_usage_chart(context, department):
    """A department's page: its GPU usage over the last 7 days."""
    return usage_chart(context, department=department)
