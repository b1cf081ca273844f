"""The pool access form (types only; the service checks the rules)."""
from __future__ import annotations

from django import forms
from django.contrib.auth.models import Group

from projects.models import Department, Project


class PoolAccessForm(forms.Form):
    open_to_cluster = forms.BooleanField(label="Open to all projects of the cluster", required=False, initial=True)
    departments = forms.ModelMultipleChoiceField(queryset=None, required=False)
    projects = forms.ModelMultipleChoiceField(queryset=None, required=False)
    groups = forms.ModelMultipleChoiceField(queryset=Group.objects.order_by("name"), required=False)
    maintenance = forms.BooleanField(required=False, help_text="Refuse new workloads, except from system administrators.")
    maintenance_note = forms.CharField(required=False, max_length=255)

    def __init__(self, *args, pool, instance=None, **kwargs):
        if instance is not None and not args:
            kwargs["initial"] = {
                "open_to_cluster": instance.open_to_cluster, "maintenance": instance.maintenance,
                "maintenance_note": instance.maintenance_note,
                "departments": list(instance.departments.values_list("pk", flat=True)),
                "projects": list(instance.projects.values_list("pk", flat=True)),
                "groups": list(instance.groups.values_list("pk", flat=True)),
            }
        super().__init__(*args, **kwargs)

        self.fields["departments"].queryset = Department.objects.filter(cluster_id=pool.cluster_id)
        self.fields["projects"].queryset = Project.objects.filter(cluster_id=pool.cluster_id)
