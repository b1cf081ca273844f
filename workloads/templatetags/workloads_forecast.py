"""The project page's "When will they start?": the project's waiting workloads with their start estimates
(workloads.forecast). It fills a place the project page's template names (registered in
WorkloadsConfig.ready(), ui/slots.py), so that the projects app never names this app; the section itself is
fetched after the page (`project_start_estimates_section`: the estimates simulate the pool's queue, slow by
nature at a large fleet)."""
from __future__ import annotations

from django import template
from django.urls import reverse

from workloads import forecast, selectors

register = template.Library()

MOST = 50


def project_start_estimates_context(*, user, project) -> dict:
    """The section's context: the project's oldest MOST waiting workloads, each with its start estimate."""
    namespaces = list(project.namespaces.values_list("name", flat=True))
    rows = list(selectors.workload_list(user=user).filter(
        cluster_id=project.cluster_id, namespace__in=namespaces, phase__in=("Pending", "Suspended"))
        .order_by("created_in_cluster", "name")[:MOST])
    waiting = [w for w in rows if selectors.is_waiting(w)]
    forecast.workloads_attach_estimates(waiting, user=user)
    return {"waiting": waiting, "most": MOST, "project": project}


@register.inclusion_tag("workloads/_start_estimates_pending.html")
def project_start_estimates(project) -> dict:
    """Where the section comes: fetched with htmx when the page has loaded (a link without script)."""
    return {"url": reverse("project-start-estimates", args=[project.pk]), "project": project}
