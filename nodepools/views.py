"""Pages of clusters, node pools and nodes. Thin: they read through selectors (restricted to what
the user may see) and write through services; a 404 hides what the user may not see."""
from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import Http404
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse

from access.rules import is_system_admin
from common.parsing import is_digits
from common.words import noun, verb
from nodepools import hints, kube, selectors, services
from nodepools.filtersets import NodeFilterSet, NodePoolFilterSet
from nodepools.forms import GpuShapeForm, NodeMoveForm, PoolCreateForm, PoolDeleteForm, PoolForm
from nodepools.models import Cluster, NodePool
from nodepools.tables import NodePoolTable, NodeTable, PodTable
from ui.pages import htmx_partial, table_page
from ui.tables import table_build, wants_csv
from ui.views import form_errors_from

SESSION_CLUSTER = "console.cluster"


def _require_admin(request) -> None:
    if not is_system_admin(request.user):
        raise PermissionDenied("Only system administrators may do this.")


def current_cluster(request, clusters=None) -> Cluster | None:
    """The cluster the user last switched to (kept in the session), else the first one it may see."""
    clusters = clusters if clusters is not None else selectors.cluster_list(user=request.user)
    wanted = request.session.get(SESSION_CLUSTER)
    return (clusters.filter(pk=wanted).first() if wanted else None) or clusters.first()


@login_required
def cluster_switch(request):
    """The cluster switcher (a GET form): remember the choice and show that cluster's overview."""
    text = request.GET.get("cluster", "").strip()
    if not is_digits(text) or len(text) > 18:
        raise Http404("No such cluster.")
    pk = int(text)
    cluster = get_object_or_404(selectors.cluster_list(user=request.user), pk=pk)
    request.session[SESSION_CLUSTER] = cluster.pk
    return redirect("cluster-overview", cluster.pk)


# ---------------------------------------------------------------------------------------------------
# Node pools

@login_required
def pool_list(request):
    pools = selectors.pool_table_list(user=request.user)
    return table_page(
        request, template="nodepools/pool_list.html", table_class=NodePoolTable, queryset=pools,
        filterset_class=NodePoolFilterSet, csv_name="node-pools", dropdown_fields=["cluster"],
        dropdown_values={"gpu_placement": ["binpack", "spread"], "cpu_placement": ["binpack", "spread"]},
        rows_hook=lambda rows: selectors.pools_attach_gpu_metrics(selectors.pools_attach_usage(list(rows))),
        context={"can_add": is_system_admin(request.user),
                 "live_clusters": list(selectors.cluster_list(user=request.user).values_list("pk", flat=True))},
    )


def _preview_key(cluster_id, label_key: str, label_value: str) -> str:
    """What a capacity preview depends on: a confirmation counts only for the label it previewed."""
    return f"{cluster_id}:{label_key}={label_value}"


def _confirmed(request, previewed: str) -> tuple[bool, bool]:
    """(confirmed, stale): the second POST confirms only what its first showed."""
    if not request.POST.get("confirm"):
        return False, False
    same = request.POST.get("previewed") == previewed
    return same, not same


@login_required
def pool_create(request):
    """Create a pool in two steps: the first POST shows what moves (nodes, GPUs, workloads, pools left
    short of their deserved quota, or that the pool will be empty); the second, with `confirm`, saves."""
    _require_admin(request)
    clusters = selectors.cluster_list(user=request.user)
    initial = {"cluster": request.GET.get("cluster") or (current_cluster(request, clusters) or Cluster()).pk}
    form = PoolCreateForm(request.POST or None, clusters=clusters, initial=initial)
    preview, previewed, stale = None, "", False
    if request.method == "POST" and form.is_valid():
        data = dict(form.cleaned_data)
        previewed = _preview_key(data["cluster"].pk, data["label_key"], data["label_value"])
        confirmed, stale = _confirmed(request, previewed)
        try:
            if confirmed:
                pool = services.pool_create(actor=request.user, **data)
            else:
                preview = services.pool_create_preview(actor=request.user, **data)
        except ValidationError as exc:
            preview = None
            form_errors_from(form, exc)
        else:
            if confirmed:
                messages.success(request, f"Node pool '{pool.name}' created: nodes labelled {pool.label} belong to it.")
                _hint(pool.cluster_id, ["pools", "nodes", "quotas"])
                return redirect("pool-detail", pool.pk)
    return render(request, "nodepools/pool_form.html", {
        "form": form, "pool": None, "preview": preview, "previewed": previewed, "preview_stale": stale})


@login_required
def pool_edit(request, pk: int):
    """Edit a pool; a change of its label first shows what moves and needs a second POST with `confirm`."""
    _require_admin(request)
    pool = get_object_or_404(NodePool.objects.restrict(request.user, "change"), pk=pk)
    fields = ["description", "gpu_placement", "cpu_placement", "gpu_limit", "topology_key"]
    if not pool.is_default:
        fields = ["name", "label_key", "label_value"] + fields
    form = PoolForm(request.POST or None, default_pool=pool.is_default,
                    initial={name: getattr(pool, name) for name in fields})
    preview, previewed, stale = None, "", False
    if request.method == "POST" and form.is_valid():
        changes = {k: v for k, v in form.cleaned_data.items() if getattr(pool, k) != v}
        previewed = _preview_key(pool.cluster_id, changes.get("label_key", pool.label_key),
                                 changes.get("label_value", pool.label_value))
        confirmed, stale = _confirmed(request, previewed)
        try:
            if not confirmed:
                preview = services.pool_update_preview(actor=request.user, pool=pool, **changes)
            if preview is None:
                services.pool_update(actor=request.user, pool=pool, **changes)
        except ValidationError as exc:
            pool.refresh_from_db()
            preview = None
            form_errors_from(form, exc)
        else:
            if preview is None:
                messages.success(request, f"Node pool '{pool.name}' saved.")
                _hint(pool.cluster_id, ["pools", "nodes"])
                return redirect("pool-detail", pool.pk)
    return render(request, "nodepools/pool_form.html", {
        "form": form, "pool": pool, "preview": preview, "previewed": previewed, "preview_stale": stale})


@login_required
def pool_delete(request, pk: int):
    """A confirmation page that says what happens to the pool's nodes, workloads and quota rows."""
    _require_admin(request)
    pool = get_object_or_404(selectors.pool_table_list(user=request.user), pk=pk)
    selectors.pools_attach_usage([pool])
    if pool.is_default:
        messages.error(request, "The default pool cannot be deleted: it holds every node that matches no other pool.")
        return redirect("pool-detail", pool.pk)
    needs_confirmation = bool(pool.node_count or pool.workload_count)
    form = PoolDeleteForm(request.POST if request.method == "POST" else None, needs_confirmation=needs_confirmation)
    if request.method == "POST" and form.is_valid():
        name, cluster_id = pool.name, pool.cluster_id
        try:
            services.pool_delete(actor=request.user, pool=NodePool.objects.get(pk=pool.pk))
        except ValidationError as exc:
            form_errors_from(form, exc)
        else:
            messages.success(request, f"Node pool '{name}' deleted; its {pool.node_count} "
                                      f"{noun(pool.node_count, 'node')} {verb(pool.node_count, 'is', 'are')} now in the "
                                      "default pool.")
            _hint(cluster_id, ["pools", "nodes"])
            return redirect(reverse("pool-list"))
    return render(request, "nodepools/pool_confirm_delete.html", {
        "pool": pool, "form": form, "needs_confirmation": needs_confirmation,
    })


@login_required
def pool_gpu_shape(request, pk: int):
    """Set a pool's GPU shape in two steps: the first POST shows the nodes whose labels change and the GPU pods
    NVIDIA's MIG manager drains from them (with their project and GPUs); the second, with `confirm` and the
    key of what was shown, writes the labels to the nodes in the cluster."""
    _require_admin(request)
    pool = get_object_or_404(NodePool.objects.restrict(request.user, "set_gpu_shape").select_related("cluster"),
                             pk=pk)
    layouts = selectors.pool_mig_layouts(user=request.user, pool=pool)
    initial = {"mig_config": pool.mig_config, "device_plugin_config": pool.device_plugin_config}
    if pool.mig_config and pool.mig_config not in layouts:
        initial = {**initial, "mig_config": GpuShapeForm.CUSTOM, "mig_config_custom": pool.mig_config}
    form = GpuShapeForm(request.POST or None, layouts=layouts, initial=initial)
    preview, stale = None, False
    if request.method == "POST" and form.is_valid():
        shape, confirmed = form.shape(), bool(request.POST.get("confirm"))
        try:
            if confirmed:
                done = services.pool_gpu_shape_apply(actor=request.user, pool=pool, **shape,
                                                     previewed=request.POST.get("previewed", ""))
            else:
                preview = services.pool_gpu_shape_preview(actor=request.user, pool=pool, **shape)
        except ValidationError as exc:
            stale = confirmed
            form_errors_from(form, exc)
            if stale:
                try:
                    preview = services.pool_gpu_shape_preview(actor=request.user, pool=pool, **shape)
                except ValidationError:
                    preview = None
        else:
            if preview is None:
                for node, message in done.failed.items():
                    messages.error(request, f"Could not label node '{node}': {message}")
                if done.labelled:
                    messages.success(request, f"GPU shape of pool '{pool.name}' set on {len(done.labelled)} node"
                                              f"{'s' if len(done.labelled) != 1 else ''}: NVIDIA's GPU operator "
                                              "applies it; this page follows as the nodes report it.")
                elif not done.failed and not any(shape.values()):
                    messages.success(request, f"GPU shape of pool '{pool.name}' cleared: the console leaves its "
                                              "nodes' labels as they are.")
                elif not done.failed:
                    messages.success(request, f"GPU shape of pool '{pool.name}' saved: its nodes already have it.")
                _hint(pool.cluster_id, ["pools", "nodes"])
                return redirect("pool-detail", pool.pk)
    return render(request, "nodepools/pool_gpu_shape.html", {
        "pool": pool, "form": form, "preview": preview, "preview_stale": stale,
        "mig_nodes": selectors.pool_gpu_shape_nodes(user=request.user, pool=pool)})


def _hint(cluster_id: int, kinds) -> None:
    """Tell live pages of this cluster to refetch (the sync does the same after its writes)."""
    try:
        hints.publish(cluster_id, kinds)
    except Exception:  # a live-update hiccup must never fail the write that already happened
        pass


# ---------------------------------------------------------------------------------------------------
# Nodes

@login_required
def node_list(request):
    nodes = selectors.node_table_list(user=request.user, sort=request.GET.get("sort", ""))
    visible = selectors.node_list(user=request.user).order_by()
    # The filter form's dropdowns of the values present: only a page shows them, not its CSV.
    dropdown_values = {} if wants_csv(request) else selectors.node_filter_values(user=request.user)
    # The CSV's GPU utilization: every node in view, as the sync's leader last read it (at most one round
    # old; a whole fleet's figures take Prometheus seconds): the clusters whose stored round is fresh are
    # read before the rows stream, the figures with the rows.
    table_kwargs = ({"gpu_figures_clusters": selectors.node_gpu_figures_fresh(
        visible.filter(gpu_capacity__gt=0).values_list("cluster_id", flat=True).distinct())}
        if wants_csv(request) else None)
    return table_page(
        request, template="nodepools/node_list.html", table_class=NodeTable, queryset=nodes,
        filterset_class=NodeFilterSet, csv_name="nodes", dropdown_fields=["cluster", "pool", "status"],
        dropdown_values=dropdown_values, table_kwargs=table_kwargs,
        context={"live_clusters": list(selectors.cluster_list(user=request.user).values_list("pk", flat=True)),
                 # The nodes whose MIG manager is changing their layout, or failed to (not in the CSV).
                 "mig_in_flight": [] if wants_csv(request) else selectors.nodes_mig_in_flight(user=request.user)},
    )


@login_required
def node_detail(request, pk: int):
    node = get_object_or_404(selectors.node_list(user=request.user), pk=pk)
    selectors.nodes_attach_usage([node])
    selectors.nodes_attach_sharing([node])
    # One budget for the page's two Prometheus reads (its figures, then its devices): a slow Prometheus
    # holds the page one budget at most, and the devices then show the reason the figures met.
    budget = selectors.GpuBudget()
    selectors.nodes_attach_gpu_metrics([node], budget=budget)
    devices, devices_reason = selectors.node_gpu_device_list(node, budget=budget)
    pods = table_build(request, PodTable, selectors.pod_list(user=request.user, node=node), prefix="pods-")
    can_move = is_system_admin(request.user)
    context = {
        "node": node, "pods": pods, "can_move": can_move, "live_clusters": [node.cluster_id],
        "gpu_devices": devices, "gpu_devices_reason": devices_reason,
        "move_form": NodeMoveForm(node=node) if can_move else None,
        "labels": sorted(node.labels.items()),
        "mig": selectors.node_mig_state(node),
    }
    template = "nodepools/node_detail.html"
    if htmx_partial(request):
        template += "#table"
    return render(request, template, context)


@login_required
def node_move(request, pk: int):
    """Move a node in two steps: the first request (GET or POST with `pool`) reads the Node from its
    cluster and shows the label changes, warnings (another GPU type, a label value overwritten) and what
    moves; the second POST, with `confirm` and the resourceVersion it was read at, patches the Node. A
    Node changed meanwhile is reported (409) and the preview shown again from its new state."""
    _require_admin(request)
    node = get_object_or_404(selectors.node_list(user=request.user), pk=pk)
    data = request.POST if request.method == "POST" else (request.GET if "pool" in request.GET else None)
    if data is None:
        return redirect("node-detail", node.pk)
    form = NodeMoveForm(data, node=node)
    if not form.is_valid():
        for errors in form.errors.values():
            for message in errors:
                messages.error(request, message)
        return redirect("node-detail", node.pk)
    pool = form.cleaned_data["pool"]
    error = None
    if request.method == "POST" and form.cleaned_data["confirm"]:
        try:
            services.node_move_to_pool(actor=request.user, node=node, pool=pool,
                                       resource_version=form.cleaned_data["resource_version"] or None)
        except services.NodeChanged as exc:
            error = " ".join(exc.messages)
        except ValidationError as exc:
            for message in exc.messages:
                messages.error(request, message)
            return redirect("node-detail", node.pk)
        else:
            messages.success(request, f"Node '{node.name}' is being moved to pool '{pool.name}': its label was set "
                                      "in the cluster; this page follows when the sync sees it.")
            return redirect("node-detail", node.pk)
    try:
        move = selectors.node_move_preview(user=request.user, node=node, pool=pool)
    except ValidationError as exc:
        for message in exc.messages:
            messages.error(request, message)
        return redirect("node-detail", node.pk)
    return render(request, "nodepools/node_move_confirm.html", {
        "node": node, "pool": pool, "move": move, "error": error, "annotation": kube.PREVIOUS_LABELS_ANNOTATION,
    })
