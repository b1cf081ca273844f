"""kubesim: a Kubernetes API server emulator (in-process or standalone), free of Django.

A small, fast HTTP server (stdlib + orjson) that serves every registered resource — core ``nodes``,
``pods``, ``namespaces``, ``events``; ``batch/v1`` jobs; ``scheduling.k8s.io/v1`` priorityclasses; and
custom resources checked by their published CRDs, schema and CEL rules (KAI Scheduler queues, pod
groups and scheduling shards, Kueue, Karpenter); and, stored as given, the kinds an installation's manifests hold
(configmaps, secrets, serviceaccounts, services, ``apps/v1`` deployments with their scale subresource,
cronjobs, poddisruptionbudgets, ingresses, networkpolicies, RBAC roles and bindings) — with list paging (``limit``/``continue``), label and field
selectors, watches (chunked JSON lines, bookmarks, bounded history, 410 Expired), PATCH (merge,
strategic merge, JSON patch), status subresources, ``metadata.generation``, optimistic concurrency,
discovery, OpenAPI and Table answers.  The real ``kubectl`` and the official ``kubernetes`` Python client
work against it unchanged.

It records every request it serves as Kubernetes RBAC names it (``access``: verb, API group,
resource[/subresource]; :meth:`KubeEmulator.access_log`, ``GET /_emulator/access_log``), so that a test
can prove a ClusterRole allows what a client used and nothing more.

It also offers a scripting surface (:class:`KubeEmulator` methods, mirrored as
``POST /_emulator/<op>``), fault injection, a chaos mode that keeps a demo cluster believable, and pure
factories for realistic Node and Pod objects.

Modules, by concern: ``store`` (objects, resourceVersions, history, paging), ``server`` (HTTP, watch),
``discovery`` and ``tables`` (what clients discover and print), ``patch`` (patch formats),
``selectors``, ``access`` (the access record), ``resources`` (the registry; the CRD manifests of ``kube/crds/``
checked by ``kube.validation``: OpenAPI through ``jsonschema``, CEL rules through ``cel``), ``factories``,
``faults``, ``chaos``, ``control`` (HTTP control surface), ``cli``; ``schedulers`` (KAI queue status),
``scheduling`` (the default scheduler, KAI Scheduler, Kueue), ``karpenter`` (Karpenter's provisioner: NodeClaims and Nodes for pending pods),
``dcgm`` (the DCGM exporter, per GPU and per MIG instance), ``nvidia`` (how the device plugin and GPU
feature discovery publish a node's GPUs: whole, MIG single/mixed, time-slicing/MPS), ``mig_manager``
(NVIDIA's MIG manager applying a node's ``nvidia.com/mig.config``); ``clock`` (the one clock of steps and timestamps), ``gc`` (owner references,
finalizers, cascading deletion), ``controllers`` (the controller loop), ``jobs`` (the Job controller),
``kubelet`` (pods start, run, end).

Run standalone::

    python -m kubesim --port 8001 --kubeconfig /tmp/kubesim.kubeconfig \\
        [--scenario cluster.json] [--demo-nodes 40 [--demo-pods 320] [--demo-shared]] [--chaos 1.0] [--controllers]
"""

from kube.labels import SelectorError
from kubesim.cli import main
from kubesim.clock import Clock, ManualClock, RealClock
from kubesim.emulator import KubeEmulator
from kubesim.errors import EXPIRED_CONTINUE_MESSAGE, ApiError
from kubesim.factories import generate_cluster, iter_cluster, make_node, make_pod
from kubesim.patch import json_merge_patch, json_patch, strategic_merge_patch
from kubesim.resources import Resource, get_resource, register_crd, register_resource, resolve_resource
from kubesim.selectors import parse_field_selector, parse_label_selector

__all__ = [
    "EXPIRED_CONTINUE_MESSAGE",
    "ApiError",
    "Clock",
    "KubeEmulator",
    "ManualClock",
    "RealClock",
    "Resource",
    "SelectorError",
    "generate_cluster",
    "get_resource",
    "iter_cluster",
    "json_merge_patch",
    "json_patch",
    "main",
    "make_node",
    "make_pod",
    "parse_field_selector",
    "parse_label_selector",
    "register_crd",
    "register_resource",
    "resolve_resource",
    "strategic_merge_patch",
]
