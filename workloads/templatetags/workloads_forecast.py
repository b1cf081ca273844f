"""The project page's "When will they start?": the project's waiting workloads with their start estimates
(workloads.forecast). It fills a place the project page's template names (registered in
WorkloadsConfig.ready(), ui/slots.py), so that the projects app never names this app."""
from __future__ import annotations

from django import template

from workloads import forecast, selectors

register = template.Library()

MOST = 50


@register.inclusion_tag("workloads/_start_estimates.html", takes_context=True)
def project_start_estimates(context, project) -> dict:
    request = context.get("request")
    user = getattr(request, "user", None)
    namespaces = list(project.namespaces.values_list("name", flat=True))
    rows = list(selectors.workload_list(user=user).filter(
        cluster_id=project.cluster_id, namespace__in=namespaces, phase__in=("Pending", "Suspended"))
        .order_by("created_in_cluster", "name")[:MOST])
    waiting = [w for w in rows if selectors.display_phase(w) in ("Pending", "Suspended")]
    forecast.workloads_attach_estimates(waiting, user=user)
    return {"waiting": waiting, "most": MOST, "project": project}
