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

    def __init__(self, *args, gpu_models: list[str] | None = None, currency: str = "", **kwargs):
        """`gpu_models`: the models the cluster's nodes report (and rates name), offered as the choices;
        `currency`: the one the rates are in, the default of a new rate (Rate.clean: one currency for all)."""
        super().__init__(*args, **kwargs)
        self.fields["pool"].queryset = NodePool.objects.select_related("cluster").order_by("cluster__name", "name")
        self.fields["pool"].label_from_instance = lambda pool: f"{pool.cluster.name} / {pool.name}"
        self.fields["pool"].empty_label = "Every pool"
        models = sorted(set(gpu_models or []) | ({self.instance.gpu_model} if self.instance.gpu_model else set()))
        if models:
            # A choice of what the nodes report, not free text to misspell (none known yet: free text).
            old = self.fields["gpu_model"]
            self.fields["gpu_model"] = forms.ChoiceField(
                label=old.label, help_text="As the cluster's nodes report it (nvidia.com/gpu.product).",
                choices=[("", "Choose a GPU model")] + [(m, m) for m in models])
        self.gpu_models = models
        if currency and not self.instance.pk:
            self.fields["currency"].initial = currency
            self.fields["currency"].help_text = f"The rates are in {currency}: every rate has the same currency."
        if self.instance.pk:
            self.fields["version"].initial = self.instance.version

    def clean_currency(self):
        return (self.cleaned_data.get("currency") or "").strip().upper()
