from rest_framework import serializers
from common.api import ModelSerializer

from audit.models import AuditEvent


class AuditEventSerializer(ModelSerializer):
    actor = serializers.CharField(source="actor_name", read_only=True, help_text="Username; empty for the system.")

    class Meta:
        model = AuditEvent
        fields = ["id", "when", "actor", "via", "action", "object_type", "object_id", "object_repr", "cluster_id",
                  "department_id", "before", "after"]
        read_only_fields = fields
