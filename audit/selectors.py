"""Reads of the audit trail, each taking the user."""
from __future__ import annotations

import json
from typing import Any, Iterator

from access.rules import role_grants, user_grants
from audit.models import AuditEvent

CSV_HEADER = ["When (UTC)", "Actor", "Through", "Action", "Object type", "Object id", "Object", "Cluster id",
              "Department id", "Before", "After"]


def user_may_read_audit(user: Any) -> bool:
    """Whether any of the user's roles lets it read some of the trail (system and department administrators)."""
    return any(role_grants(grant.role, "auditevent.view") for grant in user_grants(user))


def audit_event_list(*, user: Any):
    return AuditEvent.objects.restrict(user, "view")


def audit_csv_rows(events) -> Iterator[list]:
    for event in events.iterator(chunk_size=500):
        yield [
            event.when, event.actor_name or "system", event.via, event.action, event.object_type, event.object_id,
            event.object_repr, event.cluster_id, event.department_id,
            "" if event.before is None else json.dumps(event.before, sort_keys=True),
            "" if event.after is None else json.dumps(event.after, sort_keys=True),
        ]
