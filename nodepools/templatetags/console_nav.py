"""The top bar's cluster switcher and links: which clusters the user may see, which is current."""
from __future__ import annotations

from django import template

from audit.selectors import user_may_read_audit
from nodepools.selectors import cluster_list

register = template.Library()

# Which entry of the top bar a page belongs to (its URL name's start), to mark it as the current one.
SECTIONS = (
    ("overview", ("home", "cluster-overview")),
    # Enforcement turns the pools and quotas into the scheduler's objects: it sits beside Quota, under Capacity.
    ("capacity", ("pool-", "node-", "platform-", "podtemplate-", "ruleset-", "quota-", "provisioning-",
                  "cluster-enforcement")),
    ("organisation", ("department-", "project-", "my-projects")),
    ("workloads", ("workload-",)),
    ("usage", ("usage-",)),
    ("audit", ("audit-",)),
)


def section_of(url_name: str) -> str:
    for section, prefixes in SECTIONS:
        if any(url_name == p or (p.endswith("-") and url_name.startswith(p)) for p in prefixes):
            return section
    return ""


@register.simple_tag(takes_context=True)
def console_nav(context):
    """The clusters the user may see and the current one (for the switcher and the quota link), and
    whether the user may read the audit trail (the same access rule as the audit pages)."""
    request = context["request"]
    clusters = list(cluster_list(user=request.user).only("pk", "name"))
    current = request.session.get("console.cluster")
    if current not in [c.pk for c in clusters]:
        current = clusters[0].pk if clusters else None
    match = getattr(request, "resolver_match", None)
    return {"clusters": clusters, "current": current, "audit": user_may_read_audit(request.user),
            "section": section_of(getattr(match, "url_name", "") or "")}
