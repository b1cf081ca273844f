"""Recording audit events; called by every service that creates, changes or deletes what is audited."""
from __future__ import annotations

import json
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder
from django.db import models

from audit.context import current_via
from audit.models import AuditEvent

# Bookkeeping that changes on every write and says nothing about the change.
# Not audited: bookkeeping, and the figures the sync reads from a cluster (not anyone's configuration).
_SKIP = {"updated", "version", "gpu_figures", "gpu_figures_at", "gpu_figures_reason"}


def snapshot(obj: models.Model | None) -> dict[str, Any] | None:
    """The audited values of an object: its concrete fields (foreign keys as ids), JSON-safe."""
    if obj is None:
        return None
    values = {}
    for field in obj._meta.concrete_fields:
        if field.name in _SKIP:
            continue
        values[field.attname] = field.value_from_object(obj)
    return json.loads(json.dumps(values, cls=DjangoJSONEncoder))


def _scope(obj: models.Model, pk: Any) -> tuple[int | None, int | None]:
    """(cluster id, department id) of an audited object: its own `audit_scope()` when it has one (the
    models above this floor say where they live, so that the audit trail imports none of them)."""
    scope = getattr(obj, "audit_scope", None)
    if scope is not None:
        return scope(pk)
    if obj._meta.model_name == "cluster":
        return pk, None
    return getattr(obj, "cluster_id", None), None


def audit_record(
    *, actor: Any, action: str, obj: models.Model, before: dict[str, Any] | None = None,
    after: dict[str, Any] | None = None, object_id: Any = None,
) -> AuditEvent | None:
    """Append one event. `before`/`after` are snapshots; an update that changed nothing is not recorded."""
    if action == AuditEvent.Action.UPDATE and before == after:
        return None
    object_id = object_id if object_id is not None else obj.pk
    cluster_id, department_id = _scope(obj, object_id)
    user = actor if getattr(actor, "is_authenticated", False) else None
    return AuditEvent.objects.create(
        actor=user,
        actor_name=user.get_username() if user else "",
        via=current_via(),
        action=action,
        object_type=obj._meta.model_name,
        object_id=str(object_id),
        object_repr=str(obj)[:255],
        cluster_id=cluster_id,
        department_id=department_id,
        before=before,
        after=after,
    )
