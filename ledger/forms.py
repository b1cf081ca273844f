"""The rate form (system administrators) and the statement's month."""
from __future__ import annotations

from django import forms

from common.fields import ModelForm, StrictIntegerFormField

from ledger.models import Rate
from nodepools.models import NodePool


class RateForm(ModelForm):
    version = StrictIntegerFormField(widget=forms.HiddenInput, required=False)

    class Meta(ModelForm.Meta):
        model = Rate
        fields = ["gpu_model", "mig_profile", "pool", "currency", "valid_from", "gpu_hour", "cpu_core_hour", "memory_gib_hour",
                  "description"]

    def __init__(self, *args, gpu_models: list[str] | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["pool"].queryset = NodePool.objects.select_related("cluster").order_by("cluster__name", "name")
        self.fields["pool"].label_from_instance = lambda pool: f"{pool.cluster.name} / {pool.name}"
        self.fields["pool"].empty_label = "Every pool"
        if gpu_models:
            self.fields["gpu_model"].widget.attrs["list"] = "gpu-models"
        self.gpu_models = gpu_models or []
        if self.instance.pk:
            self.fields["version"].initial = self.instance.version

    def clean_currency(self):
        return (self.cleaned_data.get("currency") or "").strip().upper()
