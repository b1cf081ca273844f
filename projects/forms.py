"""Forms of the organisation pages: they check types; the services check the rules."""
from __future__ import annotations

from django import forms

from django.contrib.auth import get_user_model

from common.fields import StrictDecimalFormField, StrictIntegerFormField
from access.rules import Role
from kube.quantity import GIB_PLACES, gib_from_mib, mib_from_gib
from kube.labels import DNS1123_LABEL_RULE
from projects.models import DISPLAY_NAME_HELP, GPU_PLACES, QUOTA_MAX_CORES, QUOTA_MAX_GIB, QUOTA_MAX_GPUS, QUOTA_MAX_WEIGHT, Rank


NAME_HELP = f"Its Kubernetes name: {DNS1123_LABEL_RULE}."


def _display_name() -> forms.CharField:
    return forms.CharField(max_length=100, required=False, label="Display name", help_text=DISPLAY_NAME_HELP)


class DepartmentForm(forms.Form):
    display_name = _display_name()
    name = forms.CharField(max_length=63, label="Kubernetes name", help_text=NAME_HELP + " E.g. rnd for R&D.")
    description = forms.CharField(max_length=2000, widget=forms.Textarea(attrs={"rows": 2}), required=False)


class DepartmentCreateForm(DepartmentForm):
    cluster = forms.ModelChoiceField(queryset=None)
    field_order = ["cluster", "display_name", "name", "description"]

    def __init__(self, *args, clusters=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["cluster"].queryset = clusters


class ProjectForm(forms.Form):
    display_name = _display_name()
    name = forms.CharField(max_length=63, label="Kubernetes name", help_text=NAME_HELP)
    description = forms.CharField(max_length=2000, widget=forms.Textarea(attrs={"rows": 2}), required=False)
    allow_over_quota = forms.BooleanField(required=False, initial=True, label="Allow over-quota",
                                          help_text="Let workloads use idle GPUs beyond the deserved quota.")
    namespaces = forms.CharField(required=False, help_text="Kubernetes namespaces, separated by commas "
                                 "(empty on creation: runai-<name>).")

    def clean_namespaces(self):
        return [n.strip() for n in self.cleaned_data["namespaces"].split(",") if n.strip()]


class ProjectCreateForm(ProjectForm):
    department = forms.ModelChoiceField(queryset=None)
    field_order = ["department", "display_name", "name"]

    def __init__(self, *args, departments=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["department"].queryset = departments


class QuotaForm(forms.Form):
    """One quota row. Empty CPU / memory / limits mean unlimited. Memory is asked and shown in GiB (as every
    page of the console says it) and stored in MiB, as the row and the API's `_mib` fields hold it."""

    gpu_deserved = StrictDecimalFormField(label="Deserved GPUs", max_digits=10, decimal_places=GPU_PLACES,
                                          max_value=QUOTA_MAX_GPUS, unit="GPU")
    cpu_deserved = StrictDecimalFormField(label="Deserved CPU (cores)", max_digits=10, decimal_places=3, required=False,
                                          max_value=QUOTA_MAX_CORES, unit="core")
    memory_deserved_gib = StrictDecimalFormField(label="Deserved CPU memory (GiB)", max_digits=16,
                                                 decimal_places=GIB_PLACES, required=False,
                                                 max_value=QUOTA_MAX_GIB, unit=("GiB", "GiB"))
    gpu_limit = StrictDecimalFormField(label="GPU limit", max_digits=10, decimal_places=GPU_PLACES, required=False,
                                       max_value=QUOTA_MAX_GPUS, unit="GPU")
    cpu_limit = StrictDecimalFormField(label="CPU limit (cores)", max_digits=10, decimal_places=3, required=False,
                                       max_value=QUOTA_MAX_CORES, unit="core")
    memory_limit_gib = StrictDecimalFormField(label="CPU memory limit (GiB)", max_digits=16, decimal_places=GIB_PLACES,
                                              required=False, max_value=QUOTA_MAX_GIB, unit=("GiB", "GiB"))
    over_quota_weight = StrictIntegerFormField(label="Over-quota weight", min_value=0, max_value=QUOTA_MAX_WEIGHT)
    rank = forms.TypedChoiceField(choices=Rank.choices, coerce=int)
    version = StrictIntegerFormField(widget=forms.HiddenInput)

    FIELDS = ("gpu_deserved", "cpu_deserved", "memory_deserved_gib", "gpu_limit", "cpu_limit", "memory_limit_gib",
              "over_quota_weight", "rank")
    # The form's GiB fields and the row's MiB fields (the service's errors name the latter).
    GIB_FIELDS = {"memory_deserved_gib": "memory_deserved_mib", "memory_limit_gib": "memory_limit_mib"}
    # ui.views.form_errors_from: a service's error on memory_deserved_mib shows on the GiB field typed in.
    SERVICE_FIELDS = {mib: gib for gib, mib in GIB_FIELDS.items()}

    @classmethod
    def initial_from(cls, quota) -> dict:
        values = {name: getattr(quota, cls.GIB_FIELDS.get(name, name)) for name in cls.FIELDS}
        for gib, mib in cls.GIB_FIELDS.items():
            values[gib] = gib_from_mib(getattr(quota, mib))
        values["version"] = quota.version
        return values

    def values(self) -> dict:
        """The row's values (memory in MiB), for projects.services.quota_update."""
        values = {self.GIB_FIELDS.get(name, name): self.cleaned_data[name] for name in self.FIELDS}
        for gib, mib in self.GIB_FIELDS.items():
            values[mib] = mib_from_gib(self.cleaned_data[gib])
        return values


class MemberForm(forms.Form):
    username = forms.CharField(max_length=150)
    role = forms.ChoiceField(choices=[])

    def __init__(self, *args, roles=(), **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["role"].choices = [(r, Role(r).label) for r in roles]

    def clean_username(self):
        name = self.cleaned_data["username"].strip()
        user = get_user_model().objects.filter(username=name, is_active=True).first()
        if user is None:
            raise forms.ValidationError(f"No active user named '{name}'.")
        return user


class PriorityForm(forms.Form):
    """The ordered pool ids of a project's priority list (`pools` repeated, in order)."""

    pools = forms.TypedMultipleChoiceField(coerce=int, required=False, choices=[])

    def __init__(self, *args, pools=(), **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["pools"].choices = [(p.pk, p.name) for p in pools]
