"""Role assignments: subject (a user or a group) has a role in a scope (docs/concepts.md#roles)."""
from __future__ import annotations

from django.conf import settings
from django.contrib.auth.models import Group
from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import Q

from access.rules import RestrictedQuerySet, Role, ScopeType


class RoleAssignmentQuerySet(RestrictedQuerySet):
    access_level = "project"
    access_paths = {
        "cluster": ["cluster_id", "department__cluster_id", "project__cluster_id"],
        "department": ["department_id", "project__department_id"],
        "project": ["project_id"],
    }


class RoleAssignment(models.Model):
    """Subject (a user or a group) has a role in a scope: the system, a cluster, a department or a project."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.CASCADE, related_name="role_assignments"
    )
    group = models.ForeignKey(Group, null=True, blank=True, on_delete=models.CASCADE, related_name="role_assignments")
    role = models.CharField(max_length=32, choices=Role)
    scope_type = models.CharField(max_length=16, choices=ScopeType)
    # The scope's `cluster`, `department` and `project` (null outside their scope type, CASCADE) are declared
    # by the apps that own those kinds, on this model (`RoleAssignment.add_to_class` in nodepools/models.py
    # and projects/models.py): the ground floor never names a kind of an app above it.
    created = models.DateTimeField(auto_now_add=True)

    objects = RoleAssignmentQuerySet.as_manager()

    class Meta:
        # The table predates this app (it was created by projects' first migration).
        db_table = "projects_roleassignment"
        ordering = ["scope_type", "role", "pk"]
        constraints = [
            models.CheckConstraint(
                condition=(Q(user__isnull=False) & Q(group__isnull=True)) | (Q(user__isnull=True) & Q(group__isnull=False)),
                name="role_user_xor_group",
            ),
            models.CheckConstraint(
                condition=(
                    Q(scope_type="system", cluster__isnull=True, department__isnull=True, project__isnull=True)
                    | Q(scope_type="cluster", cluster__isnull=False, department__isnull=True, project__isnull=True)
                    | Q(scope_type="department", cluster__isnull=True, department__isnull=False, project__isnull=True)
                    | Q(scope_type="project", cluster__isnull=True, department__isnull=True, project__isnull=False)
                ),
                name="role_scope_matches_type",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.subject} is {self.get_role_display()} of {self.scope_label}"

    def audit_scope(self, pk: int) -> tuple[int | None, int | None]:
        """(cluster id, department id) of the scope, for the audit trail."""
        if self.project_id:
            return self.project.cluster_id, self.project.department_id
        if self.department_id:
            return self.department.cluster_id, self.department_id
        return self.cluster_id, None

    @property
    def subject(self):
        return self.user if self.user_id else self.group

    @property
    def scope_label(self) -> str:
        if self.scope_type == ScopeType.SYSTEM:
            return "the system"
        target = {"cluster": self.cluster, "department": self.department, "project": self.project}[self.scope_type]
        return f"{self.scope_type} {target}"

    def clean(self) -> None:
        allowed = Role.SCOPES[self.role] if self.role in Role.SCOPES else ()
        if self.role and self.scope_type and self.scope_type not in allowed:
            raise ValidationError(
                {"scope_type": f"A {Role(self.role).label} is assigned in the scope of {' or '.join(allowed)}, "
                 f"not of a {self.scope_type}."}
            )
