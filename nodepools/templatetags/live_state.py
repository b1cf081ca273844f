"""The cluster-state badges and banners of a live page, rendered with the page (and then kept current
over the websocket by `LiveConsumer`, which renders the same templates)."""
from django import template

from nodepools import hints

register = template.Library()


@register.simple_tag
def live_marks(cluster_ids) -> str:
    """`id:seq,...`: the clusters' hint marks as this page is rendered (live.js compares them with the
    websocket's hello, and refetches the page's tables when a hint came in between)."""
    if not cluster_ids:
        return ""
    return ",".join(f"{pk}:{seq}" for pk, seq in sorted(hints.marks(cluster_ids).items()))


@register.simple_tag(takes_context=True)
def live_cluster_states(context, cluster_ids) -> list[dict]:
    request = context.get("request")
    if not cluster_ids or request is None or not request.user.is_authenticated:
        return []
    return hints.cluster_states(user=request.user, cluster_ids=cluster_ids)


@register.inclusion_tag("live/data_age.html")
def live_data_age(cluster_states) -> dict:
    """The header's "updated 4 s ago" of the page's clusters (static/js/freshness.js keeps it counting)."""
    return {"age": hints.data_age(cluster_states)}
