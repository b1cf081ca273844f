"""The append-only audit trail: who changed what, when, through what, with the values before and after."""
from __future__ import annotations

from django.conf import settings
from django.core.serializers.json import DjangoJSONEncoder
from django.db import models

from audit.context import CHANNELS
from access.rules import RestrictedQuerySet


class AuditEventQuerySet(RestrictedQuerySet):
    access_level = "department"
    access_paths = {"cluster": ["cluster_id"], "department": ["department_id"]}

    def update(self, **kwargs):  # append-only
        raise TypeError("Audit events are append-only.")

    def delete(self):
        raise TypeError("Audit events are append-only.")


class AuditEvent(models.Model):
    class Action(models.TextChoices):
        CREATE = "create", "Create"
        UPDATE = "update", "Update"
        DELETE = "delete", "Delete"
        MOVE = "move", "Move node to pool"

    when = models.DateTimeField(auto_now_add=True, db_index=True)
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    # Kept as text so that the trail still names who it was after the account is gone.
    actor_name = models.CharField(max_length=150, blank=True)
    via = models.CharField(max_length=8, choices=[(c, c) for c in CHANNELS])
    action = models.CharField(max_length=8, choices=Action)
    object_type = models.CharField(max_length=32, db_index=True)
    object_id = models.CharField(max_length=64)
    object_repr = models.CharField(max_length=255)
    # Where the object lives, for scoping who may read the event (ids, not keys: the trail outlives them).
    cluster_id = models.BigIntegerField(null=True, blank=True, db_index=True)
    department_id = models.BigIntegerField(null=True, blank=True, db_index=True)
    before = models.JSONField(null=True, blank=True, encoder=DjangoJSONEncoder)
    after = models.JSONField(null=True, blank=True, encoder=DjangoJSONEncoder)

    objects = AuditEventQuerySet.as_manager()

    class Meta:
        ordering = ["-when", "-pk"]

    def __str__(self) -> str:
        return f"{self.when:%Y-%m-%d %H:%M:%S} {self.actor_name or 'system'} {self.action} {self.object_type} {self.object_repr}"

    def save(self, *args, **kwargs):
        if self.pk is not None:
            raise TypeError("Audit events are append-only.")
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        raise TypeError("Audit events are append-only.")
