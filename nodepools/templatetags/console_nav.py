"""The top bar's cluster switcher and links: which clusters the user may see, which is current."""
from __future__ import annotations

from django import template

from audit.selectors import user_may_read_audit
from nodepools.selectors import cluster_list

register = template.Library()


@register.simple_tag(takes_context=True)
def console_nav(context):
    """The clusters the user may see and the current one (for the switcher and the quota link), and
    whether the user may read the audit trail (the same access rule as the audit pages)."""
    request = context["request"]
    clusters = list(cluster_list(user=request.user).only("pk", "name"))
    current = request.session.get("console.cluster")
    if current not in [c.pk for c in clusters]:
        current = clusters[0].pk if clusters else None
    return {"clusters": clusters, "current": current, "audit": user_may_read_audit(request.user)}
