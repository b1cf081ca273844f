"""{% chart figure "id" %}: a figure of ui/charts.py drawn by static/js/charts.js, with its table."""
from django import template

from ui.charts import figure_table

register = template.Library()


@register.inclusion_tag("ui/_chart.html")
def chart(figure, chart_id, empty=""):
    return {"figure": figure, "table": figure_table(figure), "chart_id": chart_id, "empty": empty}
