"""The cluster's enforcement page: which scheduler acts on the console's quotas, what changing it would
create, change and delete (a dry run against the cluster), what the cluster refused, and what the
scheduler reports about its queues beside the console's own allocation."""
from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.shortcuts import get_object_or_404, redirect, render

from access.rules import is_system_admin
from enforcers import selectors, services
from enforcers.forms import EnforcementForm
from enforcers.models import Enforcer
from kube.client import api_error_message
from nodepools.models import Cluster
from nodepools.sync import api_client_for


def _dry_run(cluster: Cluster, enforcer: str):
    """The plan of switching to `enforcer`, or (None, the reason it could not be computed)."""
    try:
        with api_client_for(cluster) as api_client:
            return services.enforcement_preview(cluster=cluster, enforcer=enforcer, api_client=api_client), ""
    except Exception as exc:  # noqa: BLE001 - an unreachable cluster is reported on the page
        return None, api_error_message(exc)


@login_required
def enforcement(request, pk: int):
    cluster = get_object_or_404(Cluster.objects.restrict(request.user, "view"), pk=pk)
    current = services.enforcement_get(cluster=cluster)
    can_change = is_system_admin(request.user)
    form = EnforcementForm(request.POST or None, initial={"enforcer": current.enforcer})
    preview = None
    preview_error = ""
    if request.method == "POST":
        if not can_change:
            raise PermissionDenied("Only system administrators may choose a cluster's enforcer.")
        if form.is_valid():
            enforcer = form.cleaned_data["enforcer"]
            if form.cleaned_data["confirm"] or enforcer == current.enforcer:
                services.enforcement_set(actor=request.user, cluster=cluster, enforcer=enforcer)
                messages.success(request, f"Enforcer of {cluster.name}: {Enforcer(enforcer).label}. The sync brings "
                                          "the cluster in step within seconds.")
                return redirect("cluster-enforcement", cluster.pk)
            preview, preview_error = _dry_run(cluster, enforcer)
            if preview is None:
                # Without the cluster, at least what the console would hold out there.
                preview_error = (f"The cluster could not be read ({preview_error}); these are the objects the "
                                 "console would create, without what it would change or delete.")
                preview = services.plan(services.desired_for(cluster, enforcer), [])
            form = EnforcementForm(initial={"enforcer": enforcer, "confirm": True})
    context = {
        "cluster": cluster, "current": current, "form": form, "can_change": can_change,
        "preview": preview, "preview_error": preview_error,
        "status": selectors.queue_status(user=request.user, cluster=cluster, everything=request.GET.get("empty") == "shown"),
        "refused": selectors.refused_writes(user=request.user, cluster=cluster),
        "live_clusters": [cluster.pk],
    }
    return render(request, "enforcers/enforcement.html", context)
