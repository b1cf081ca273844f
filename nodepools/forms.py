"""Forms of the pool and node pages: they check types; the services check the rules."""
from __future__ import annotations

from django import forms

from common.fields import StrictIntegerFormField

from nodepools.models import Cluster, NodePool, PlacementStrategy


class PoolForm(forms.Form):
    # No max_length here: a browser would cut a 64th character off silently (maxlength); the service
    # says what is wrong, in the Kubernetes API server's words, naming the field.
    name = forms.CharField(help_text="Lowercase letters, digits and '-' (a DNS-1123 label).")
    label_key = forms.CharField(help_text="Node label key, e.g. gpu-type or karpenter.sh/nodepool.")
    label_value = forms.CharField(required=False, help_text="Node label value, e.g. A100.")
    description = forms.CharField(max_length=2000, widget=forms.Textarea(attrs={"rows": 2}), required=False)
    gpu_placement = forms.ChoiceField(label="GPU placement strategy", choices=PlacementStrategy.choices,
                                      initial=PlacementStrategy.BINPACK)
    cpu_placement = forms.ChoiceField(label="CPU placement strategy", choices=PlacementStrategy.choices,
                                      initial=PlacementStrategy.BINPACK)
    gpu_limit = StrictIntegerFormField(label="GPU capacity limit", min_value=0, required=False,
                                   help_text="At most this many GPUs (empty: no limit).")
    topology_key = forms.CharField(label="Topology label", required=False,
                                   help_text="Node label naming the pool's topology domains, for the largest gang "
                                             "inside one domain (empty: the zone, topology.kubernetes.io/zone).")

    def __init__(self, *args, default_pool: bool = False, **kwargs):
        super().__init__(*args, **kwargs)
        if default_pool:
            # The default pool keeps its name and has no label: it holds every unmatched node.
            for name in ("name", "label_key", "label_value"):
                del self.fields[name]


class PoolCreateForm(PoolForm):
    cluster = forms.ModelChoiceField(queryset=Cluster.objects.none())
    field_order = ["cluster", "name", "label_key", "label_value"]

    def __init__(self, *args, clusters=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["cluster"].queryset = clusters if clusters is not None else Cluster.objects.none()


class PoolDeleteForm(forms.Form):
    confirm = forms.BooleanField(
        required=False, label="I understand what happens to these nodes, workloads and quotas.",
    )

    def __init__(self, *args, needs_confirmation: bool = True, **kwargs):
        super().__init__(*args, **kwargs)
        self.needs_confirmation = needs_confirmation

    def clean_confirm(self):
        value = self.cleaned_data.get("confirm")
        if self.needs_confirmation and not value:
            raise forms.ValidationError("Tick the box to confirm: this pool still has nodes or running workloads.")
        return value


class NodeMoveForm(forms.Form):
    pool = forms.ModelChoiceField(queryset=NodePool.objects.none(), label="Move to pool")
    # The Node's resourceVersion the preview was read at: a change since is refused (409), not overwritten.
    resource_version = forms.CharField(required=False, widget=forms.HiddenInput)
    confirm = forms.BooleanField(required=False, widget=forms.HiddenInput)

    def __init__(self, *args, node=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["pool"].queryset = NodePool.objects.filter(cluster_id=node.cluster_id).exclude(pk=node.pool_id)


class GpuShapeForm(forms.Form):
    """A pool's GPU shape: a MIG layout chosen from those offered (or a custom one named) and the device
    plugin's configuration. The service checks the values."""

    CUSTOM = "custom"
    mig_config = forms.ChoiceField(
        label="MIG layout", required=False,
        help_text="How NVIDIA's MIG manager cuts each GPU of the pool's MIG-capable nodes (nvidia.com/mig.config).")
    mig_config_custom = forms.CharField(
        label="Custom MIG layout", required=False,
        help_text="With 'Custom layout': the name of a layout of your MIG manager's configuration.")
    device_plugin_config = forms.CharField(
        label="Device plugin configuration", required=False,
        help_text="The name of a configuration in NVIDIA's device plugin ConfigMap, e.g. one with time-slicing "
                  "replicas (nvidia.com/device-plugin.config; empty: not set by the console).")

    def __init__(self, *args, layouts=(), **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["mig_config"].choices = [("", "Not set by the console"), *((n, n) for n in layouts),
                                             (self.CUSTOM, "Custom layout…")]

    def clean(self):
        data = super().clean()
        if data.get("mig_config") == self.CUSTOM:
            custom = (data.get("mig_config_custom") or "").strip()
            if not custom:
                self.add_error("mig_config_custom", "Name the custom MIG layout (or choose one of the list).")
            data["mig_config"] = custom
        data["device_plugin_config"] = (data.get("device_plugin_config") or "").strip()
        return data

    def shape(self) -> dict[str, str]:
        return {"mig_config": self.cleaned_data["mig_config"],
                "device_plugin_config": self.cleaned_data["device_plugin_config"]}
