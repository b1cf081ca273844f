from rest_framework import serializers

from audit.models import AuditEvent


class AuditEventSerializer(serializers.ModelSerializer):
    actor = serializers.CharField(source="actor_name", read_only=True, help_text="Username; empty for the system.")

    class Meta:
        model = AuditEvent
        fields = ["id", "when", "actor", "via", "action", "object_type", "object_id", "object_repr", "cluster_id",
                  "department_id", "before", "after"]
        read_only_fields = fields
