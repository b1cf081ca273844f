"""The NodePool form: one field per part of the blueprint, lists one item a line. It turns the lines into
a spec (types only); the rules are checked by provisioning.validation through the services, and their
errors (named by the spec path) land on the field they belong to."""
from __future__ import annotations

import copy
import re
from typing import Any

from django import forms

from common.fields import StrictIntegerFormField

from kube.taints import taint_text
from kube import gpu as kube_gpu
from provisioning import examples, validation

REQUIREMENTS_HELP = ("One a line: key, operator (In NotIn Exists DoesNotExist Gt Lt Gte Lte), then values separated "
                     "by commas, optionally minValues=N. E.g. karpenter.sh/capacity-type In spot,on-demand")
TAINTS_HELP = "One a line: key=value:Effect or key:Effect (NoSchedule, PreferNoSchedule, NoExecute)."
BUDGETS_HELP = ("One a line: nodes | schedule | duration | reasons. Nodes is N or N%; schedule a cron line "
                "(e.g. 0 9 * * mon-fri) with a duration (e.g. 8h); reasons among Underutilized, Empty, Drifted. "
                "E.g. 10%   or   0 | 0 9 * * mon-fri | 8h | Drifted")
LIMITS = (("limit_cpu", "cpu"), ("limit_memory", "memory"), ("limit_gpu", kube_gpu.GPU_RESOURCE), ("limit_nodes", "nodes"))

# Spec paths -> the form field their errors go to.
PATHS = [
    ("metadata.name", "name"), ("spec.weight", "weight"), ("spec.limits[cpu]", "limit_cpu"),
    ("spec.limits[memory]", "limit_memory"), ("spec.limits[nvidia.com/gpu]", "limit_gpu"),
    ("spec.limits[nodes]", "limit_nodes"), ("spec.disruption.consolidationPolicy", "consolidation_policy"),
    ("spec.disruption.consolidateAfter", "consolidate_after"), ("spec.disruption.budgets", "budgets"),
    ("spec.template.metadata.labels", "labels"), ("spec.template.spec.nodeClassRef.group", "node_class_group"),
    ("spec.template.spec.nodeClassRef.kind", "node_class_kind"), ("spec.template.spec.nodeClassRef.name", "node_class_name"),
    ("spec.template.spec.requirements", "requirements"), ("spec.template.spec.taints", "taints"),
    ("spec.template.spec.startupTaints", "startup_taints"), ("spec.template.spec.expireAfter", "expire_after"),
    ("spec.template.spec.terminationGracePeriod", "termination_grace_period"),
    # The console pool's own fields (nodepools' rules: a pool of that name or label already exists, ...).
    ("name", "name"), ("label_value", "name"), ("description", "description"), ("gpu_limit", "limit_gpu"),
]


def field_for(path: str) -> str | None:
    for prefix, name in PATHS:
        if path == prefix or path.startswith(prefix + "[") or path.startswith(prefix + "."):
            return name
    return None


def _line_of(path: str) -> str:
    match = re.search(r"(requirements|taints|startupTaints|budgets)\[(\d+)\]", path)
    return f"line {int(match.group(2)) + 1}: " if match else ""


def _lines(text: str) -> list[str]:
    return [line.strip() for line in (text or "").splitlines() if line.strip()]


def requirements_text(requirements: list[dict]) -> str:
    out = []
    for r in requirements or []:
        line = f"{r.get('key', '')} {r.get('operator', '')}"
        if r.get("values"):
            line += " " + ",".join(r["values"])
        if r.get("minValues"):
            line += f" minValues={r['minValues']}"
        out.append(line)
    return "\n".join(out)


def taints_text(taints: list[dict]) -> str:
    return "\n".join(taint_text(t) for t in taints or [])


def budgets_text(budgets: list[dict]) -> str:
    out = []
    for b in budgets or []:
        parts = [b.get("nodes", ""), b.get("schedule", ""), b.get("duration", ""), ",".join(b.get("reasons") or [])]
        while len(parts) > 1 and not parts[-1]:
            parts.pop()
        out.append(" | ".join(parts))
    return "\n".join(out)


def labels_text(labels: dict) -> str:
    return "\n".join(f"{k}={v}" for k, v in (labels or {}).items())


class NodePoolForm(forms.Form):
    name = forms.CharField(help_text="The NodePool's name (and the console pool's): a DNS-1123 label, e.g. h100-prod.")
    description = forms.CharField(max_length=2000, required=False, widget=forms.Textarea(attrs={"rows": 2}),
                                  help_text="The console pool's description.")
    weight = StrictIntegerFormField(required=False, help_text="1 to 100: Karpenter tries NodePools of higher weight first.")
    requirements = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 6}), help_text=REQUIREMENTS_HELP)
    taints = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 2}), help_text=TAINTS_HELP)
    startup_taints = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 2}),
                                     help_text="Taints a node starts with until a daemon removes them. " + TAINTS_HELP)
    labels = forms.CharField(label="Node labels", required=False, widget=forms.Textarea(attrs={"rows": 2}),
                             help_text="One a line: key=value, put on every node launched.")
    limit_cpu = forms.CharField(label="Limit: CPU", required=False, help_text="e.g. 1000 (cores); empty: no limit.")
    limit_memory = forms.CharField(label="Limit: memory", required=False, help_text="e.g. 8Ti; empty: no limit.")
    limit_gpu = forms.CharField(label="Limit: GPUs (nvidia.com/gpu)", required=False,
                                help_text="The most GPUs this pool may grow to; the console pool's GPU capacity limit.")
    limit_nodes = forms.CharField(label="Limit: nodes", required=False, help_text="e.g. 10; empty: no limit.")
    consolidation_policy = forms.ChoiceField(choices=[(p, p) for p in validation.POLICIES],
                                             help_text="WhenEmpty never consolidates busy nodes.")
    consolidate_after = forms.CharField(required=False, help_text="e.g. 30s, 5m, 1h or Never.")
    budgets = forms.CharField(label="Disruption budgets", required=False, widget=forms.Textarea(attrs={"rows": 3}),
                              help_text=BUDGETS_HELP)
    expire_after = forms.CharField(required=False, help_text="Nodes are replaced after this long, e.g. 720h or Never.")
    termination_grace_period = forms.CharField(required=False, help_text="e.g. 48h; empty: none.")
    node_class_group = forms.CharField(label="NodeClass group", initial=examples.NODE_CLASS["group"])
    node_class_kind = forms.CharField(label="NodeClass kind", initial=examples.NODE_CLASS["kind"])
    node_class_name = forms.CharField(label="NodeClass name", initial=examples.NODE_CLASS["name"])
    resource_version = forms.CharField(required=False, widget=forms.HiddenInput)

    def __init__(self, *args, editing: bool = False, **kwargs):
        super().__init__(*args, **kwargs)
        self.editing = editing
        if editing:
            del self.fields["name"]
            del self.fields["description"]

    @staticmethod
    def initial_from(spec: dict[str, Any], *, name: str = "", resource_version: str = "") -> dict[str, Any]:
        template = spec.get("template") or {}
        tspec = template.get("spec") or {}
        disruption = spec.get("disruption") or {}
        limits = spec.get("limits") or {}
        ref = tspec.get("nodeClassRef") or {}
        initial = {
            "name": name, "weight": spec.get("weight"),
            "requirements": requirements_text(tspec.get("requirements")),
            "taints": taints_text(tspec.get("taints")), "startup_taints": taints_text(tspec.get("startupTaints")),
            "labels": labels_text((template.get("metadata") or {}).get("labels")),
            "consolidation_policy": disruption.get("consolidationPolicy") or "WhenEmptyOrUnderutilized",
            "consolidate_after": disruption.get("consolidateAfter") or "",
            "budgets": budgets_text(disruption.get("budgets")),
            "expire_after": tspec.get("expireAfter") or "",
            "termination_grace_period": tspec.get("terminationGracePeriod") or "",
            "node_class_group": ref.get("group", ""), "node_class_kind": ref.get("kind", ""),
            "node_class_name": ref.get("name", ""), "resource_version": resource_version,
        }
        for field, key in LIMITS:
            initial[field] = str(limits[key]) if key in limits else ""
        return initial

    # -- parsing the lines (types only) ---------------------------------------------------------------
    def clean_requirements(self) -> list[dict]:
        out, errors = [], []
        for n, line in enumerate(_lines(self.cleaned_data.get("requirements")), 1):
            parts = line.split()
            if len(parts) < 2:
                errors.append(f"line {n}: a requirement is a key and an operator, then values (got {line!r})")
                continue
            item: dict[str, Any] = {"key": parts[0], "operator": parts[1]}
            values: list[str] = []
            for part in parts[2:]:
                if part.startswith("minValues="):
                    try:
                        item["minValues"] = int(part.split("=", 1)[1])
                    except ValueError:
                        errors.append(f"line {n}: minValues must be a whole number (got {part!r})")
                else:
                    values.extend(v.strip() for v in part.split(",") if v.strip())
            if values:
                item["values"] = values
            out.append(item)
        if errors:
            raise forms.ValidationError(errors)
        return out

    @staticmethod
    def _taints(text: str) -> list[dict]:
        out, errors = [], []
        for n, line in enumerate(_lines(text), 1):
            pair, sep, effect = line.rpartition(":")
            if not sep:
                errors.append(f"line {n}: a taint is key=value:Effect or key:Effect (got {line!r})")
                continue
            key, eq, value = pair.partition("=")
            taint = {"key": key.strip(), "effect": effect.strip()}
            if eq:
                taint["value"] = value.strip()
            out.append(taint)
        if errors:
            raise forms.ValidationError(errors)
        return out

    def clean_taints(self) -> list[dict]:
        return self._taints(self.cleaned_data.get("taints"))

    def clean_startup_taints(self) -> list[dict]:
        return self._taints(self.cleaned_data.get("startup_taints"))

    def clean_labels(self) -> dict[str, str]:
        out, errors = {}, []
        for n, line in enumerate(_lines(self.cleaned_data.get("labels")), 1):
            key, eq, value = line.partition("=")
            if not eq:
                errors.append(f"line {n}: a label is key=value (got {line!r})")
                continue
            out[key.strip()] = value.strip()
        if errors:
            raise forms.ValidationError(errors)
        return out

    def clean_budgets(self) -> list[dict]:
        out = []
        for line in _lines(self.cleaned_data.get("budgets")):
            parts = [p.strip() for p in line.split("|")]
            budget: dict[str, Any] = {"nodes": parts[0]}
            if len(parts) > 1 and parts[1]:
                budget["schedule"] = parts[1]
            if len(parts) > 2 and parts[2]:
                budget["duration"] = parts[2]
            if len(parts) > 3 and parts[3]:
                budget["reasons"] = [r.strip() for r in parts[3].split(",") if r.strip()]
            out.append(budget)
        return out

    # -- the spec ------------------------------------------------------------------------------------
    def spec(self, base: dict[str, Any] | None = None) -> dict[str, Any]:
        """The NodePool spec from the form, keeping what the form does not show of `base` (e.g. other
        limits, annotations, replicas)."""
        data = self.cleaned_data
        spec = copy.deepcopy(base or {})
        if data.get("weight") is None:
            spec.pop("weight", None)
        else:
            spec["weight"] = data["weight"]
        limits = dict(spec.get("limits") or {})
        for field, key in LIMITS:
            value = (data.get(field) or "").strip()
            if value:
                limits[key] = value
            else:
                limits.pop(key, None)
        spec["limits"] = limits
        disruption = dict(spec.get("disruption") or {})
        disruption["consolidationPolicy"] = data["consolidation_policy"]
        for key, field in (("consolidateAfter", "consolidate_after"),):
            if data.get(field):
                disruption[key] = data[field].strip()
            else:
                disruption.pop(key, None)
        disruption["budgets"] = data.get("budgets") or []
        spec["disruption"] = disruption
        template = dict(spec.get("template") or {})
        metadata = dict(template.get("metadata") or {})
        metadata["labels"] = data.get("labels") or {}
        template["metadata"] = metadata
        tspec = dict(template.get("spec") or {})
        tspec["nodeClassRef"] = {"group": data["node_class_group"].strip(), "kind": data["node_class_kind"].strip(),
                                 "name": data["node_class_name"].strip()}
        tspec["requirements"] = data.get("requirements") or []
        tspec["taints"] = data.get("taints") or []
        tspec["startupTaints"] = data.get("startup_taints") or []
        for key, field in (("expireAfter", "expire_after"), ("terminationGracePeriod", "termination_grace_period")):
            if data.get(field):
                tspec[key] = data[field].strip()
            else:
                tspec.pop(key, None)
        template["spec"] = tspec
        spec["template"] = template
        return spec

    def add_spec_errors(self, exc) -> None:
        """A service's ValidationError keyed by spec paths, onto the fields (the path stays in the message)."""
        for path, messages in exc.message_dict.items():
            field = field_for(path)
            if field is not None and field not in self.fields:
                field = None
            for message in messages:
                if path == "__all__":
                    self.add_error(None, message)
                elif "." not in path and field is not None:  # a console pool field: its own words
                    self.add_error(field, message)
                else:
                    self.add_error(field, f"{_line_of(path)}{path}: {message}")


class NodePoolDeleteForm(forms.Form):
    CHOICES = [("keep", "Keep the Karpenter NodePool (Karpenter keeps its nodes and launches more for pending pods)"),
               ("delete", "Delete the Karpenter NodePool too (Karpenter drains and terminates its nodes)")]
    nodepool = forms.ChoiceField(label="The Karpenter NodePool", choices=CHOICES, widget=forms.RadioSelect)
    resource_version = forms.CharField(required=False, widget=forms.HiddenInput)
    confirm = forms.BooleanField(required=True, label="I understand what happens to this pool's nodes and quotas.")
