from django import template

from usage import selectors
from usage.charts import usage_figure

register = template.Library()


@register.inclusion_tag("ui/_chart.html", takes_context=True)
def usage_chart(context, pool=None, department=None, days=7):
    """GPU usage over the last `days` of a pool, a department, or (neither) every pool the user may see."""
    from ui.charts import figure_table

    request = context.get("request")
    user = getattr(request, "user", None)
    pool = pool or None  # an unset template variable arrives as ""
    department = department or None
    try:
        days = max(1, min(int(days), 366))
    except (TypeError, ValueError):
        days = 7
    points = selectors.gpu_series(user=user, pool=pool, department=department, days=days) if user else []
    subject = f"node pool {pool}" if pool else f"department {department}" if department else "all node pools you may see"
    figure = usage_figure(points, subject=subject, days=days)
    empty = ("No usage history yet: snapshots are taken every 15 minutes by manage.py snapshot_usage."
             if not points else "")
    return {"figure": figure, "table": figure_table(figure), "chart_id": "usage-chart", "empty": empty}
