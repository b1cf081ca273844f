"""Pages of provisioning: a Karpenter-backed pool created, its NodePool edited, the pool deleted (asking
whether the NodePool goes too). Thin: reads through selectors, writes through services. The blueprint
itself shows on the pool page (templatetags/provisioning.py)."""
from __future__ import annotations

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.shortcuts import get_object_or_404, redirect, render

from access.rules import is_system_admin
from common.exceptions import ConcurrentUpdate
from nodepools import hints
from nodepools import selectors as pool_selectors
from nodepools.models import Cluster, NodePool
from provisioning import examples, services
from provisioning.forms import NodePoolDeleteForm, NodePoolForm
from provisioning.kubeapi import NodePools
from provisioning.models import KarpenterNodePool, NodeClaim, backing_name


def _require_admin(request) -> None:
    if not is_system_admin(request.user):
        raise PermissionDenied("Only system administrators may create, change or delete Karpenter NodePools.")


def _hint(cluster_id: int) -> None:
    try:
        hints.publish(cluster_id, ["pools", "nodes", "quotas"])
        hints.record(cluster_id)
    except Exception:  # pragma: no cover - a hint is best effort
        pass


class CreateForm(NodePoolForm):
    cluster = forms.ModelChoiceField(queryset=Cluster.objects.none())
    field_order = ["cluster", "name", "description"]

    def __init__(self, *args, clusters=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["cluster"].queryset = clusters if clusters is not None else Cluster.objects.none()


@login_required
def pool_create(request):
    """A console pool backed by a new Karpenter NodePool, from one of the examples (docs/administration/karpenter.md)."""
    _require_admin(request)
    clusters = pool_selectors.cluster_list(user=request.user)
    example = request.GET.get("example") or "a100-standard"
    if example not in examples.EXAMPLES:
        example = "a100-standard"
    if request.method == "POST":
        form = CreateForm(request.POST, clusters=clusters)
        if form.is_valid():
            data = form.cleaned_data
            try:
                pool = services.provisioned_pool_create(
                    actor=request.user, cluster=data["cluster"], name=data["name"], spec=form.spec(),
                    description=data.get("description") or "")
            except ValidationError as exc:
                form.add_spec_errors(exc)
            else:
                messages.success(request, f"Node pool '{pool.name}' created with its Karpenter NodePool: Karpenter "
                                          "launches nodes for it when workloads need them.")
                _hint(pool.cluster_id)
                return redirect("pool-detail", pool.pk)
    else:
        initial = NodePoolForm.initial_from(examples.example_spec(example), name=example)
        session_cluster = request.session.get("console.cluster")
        initial["cluster"] = session_cluster if clusters.filter(pk=session_cluster).exists() else clusters.first()
        form = CreateForm(initial=initial, clusters=clusters)
    return render(request, "provisioning/nodepool_form.html", {
        "form": form, "pool": None, "examples": examples.EXAMPLES, "example": example})


@login_required
def nodepool_edit(request, pk: int):
    """Edit the Karpenter NodePool backing a pool (or create it when the cluster has none), conditional
    on the resourceVersion the form was read at."""
    _require_admin(request)
    pool = get_object_or_404(NodePool.objects.restrict(request.user, "change").select_related("cluster"), pk=pk)
    name = backing_name(pool)
    if not name:
        messages.error(request, f"Pool '{pool.name}' is not backed by a Karpenter NodePool: its label is not "
                                "karpenter.sh/nodepool=<name>.")
        return redirect("pool-detail", pool.pk)
    conflict, current, unreachable = None, None, ""
    try:
        with NodePools(pool.cluster) as api:
            current = api.get(name)
    except Exception as exc:  # noqa: BLE001 - a cluster that cannot be reached: say so, keep the page
        unreachable = str(exc)
    if request.method == "POST":
        form = NodePoolForm(request.POST, editing=True)
        if form.is_valid():
            base = (current or {}).get("spec") or {}
            try:
                if current is None and not form.cleaned_data.get("resource_version"):
                    services.karpenter_nodepool_create(actor=request.user, cluster=pool.cluster, name=name,
                                                       spec=form.spec())
                else:
                    services.karpenter_nodepool_update(
                        actor=request.user, cluster=pool.cluster, name=name, spec=form.spec(base),
                        resource_version=form.cleaned_data.get("resource_version") or "")
            except ConcurrentUpdate as exc:
                conflict = str(exc)
            except ValidationError as exc:
                form.add_spec_errors(exc)
            else:
                messages.success(request, f"Karpenter NodePool '{name}' saved.")
                _hint(pool.cluster_id)
                return redirect("pool-detail", pool.pk)
    else:
        if current is not None:
            initial = NodePoolForm.initial_from(current.get("spec") or {}, name=name,
                                                resource_version=str(current["metadata"].get("resourceVersion") or ""))
        else:
            initial = NodePoolForm.initial_from(examples.example_spec("a100-standard"), name=name)
            if pool.gpu_limit is not None:
                initial["limit_gpu"] = str(pool.gpu_limit)
        form = NodePoolForm(initial=initial, editing=True)
    return render(request, "provisioning/nodepool_form.html", {
        "form": form, "pool": pool, "name": name, "exists": current is not None, "conflict": conflict,
        "unreachable": unreachable})


@login_required
def pool_delete(request, pk: int):
    """Delete a Karpenter-backed pool, asking whether its NodePool goes too and saying what Karpenter
    then does with the nodes."""
    _require_admin(request)
    pool = get_object_or_404(pool_selectors.pool_table_list(user=request.user), pk=pk)
    pool_selectors.pools_attach_usage([pool])
    name = backing_name(pool)
    if pool.is_default or not name:
        return redirect("pool-delete", pool.pk)
    row = KarpenterNodePool.objects.filter(cluster_id=pool.cluster_id, name=name).first()
    claims = NodeClaim.objects.filter(cluster_id=pool.cluster_id, nodepool=name).count()
    conflict = None
    if request.method == "POST":
        form = NodePoolDeleteForm(request.POST)
        if form.is_valid():
            delete_nodepool = form.cleaned_data["nodepool"] == "delete"
            try:
                services.provisioned_pool_delete(
                    actor=request.user, pool=NodePool.objects.get(pk=pool.pk), delete_nodepool=delete_nodepool,
                    resource_version=form.cleaned_data.get("resource_version") or "")
            except ConcurrentUpdate as exc:
                conflict = str(exc)
            except ValidationError as exc:
                for message in exc.messages:
                    form.add_error(None, message)
            else:
                if delete_nodepool:
                    messages.success(request, f"Node pool '{pool.name}' and Karpenter NodePool '{name}' deleted: "
                                              "Karpenter drains and terminates its nodes.")
                else:
                    messages.success(request, f"Node pool '{pool.name}' deleted; Karpenter NodePool '{name}' is kept.")
                _hint(pool.cluster_id)
                return redirect("pool-list")
    else:
        form = NodePoolDeleteForm(initial={"nodepool": "keep", "resource_version": row.resource_version if row else ""})
    return render(request, "provisioning/pool_confirm_delete.html", {
        "pool": pool, "name": name, "nodepool": row, "claims": claims, "form": form, "conflict": conflict})
