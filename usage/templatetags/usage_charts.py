import datetime

from django import template

from ui.charts import figure_table
from usage import selectors
from usage.charts import usage_figure

register = template.Library()


def _day(value) -> datetime.datetime | None:
    """A date of the page's filter (a date or its ISO text) as midnight UTC; None when there is none."""
    if isinstance(value, str):
        try:
            value = datetime.date.fromisoformat(value)
        except ValueError:
            return None
    if not isinstance(value, datetime.date):
        return None
    return datetime.datetime.combine(value, datetime.time.min, tzinfo=datetime.timezone.utc)


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
    start, end = _day(date_from), _day(date_to)
    if end is not None:
        end += datetime.timedelta(days=1)  # the last day chosen is included
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
