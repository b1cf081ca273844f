"""Forms of the platform, pool-settings, pod-template and rule-set pages: they take text (JSON or YAML
for the structured fields, names one per line for ordered lists); the services parse and check it."""

from __future__ import annotations


import yaml
from django import forms

from django.utils.html import format_html
from django.utils.safestring import mark_safe

from common.fields import StrictIntegerFormField
from workloads import shell
from workloads.models import PodSecurityLevel
from workloads.selectors import submit_platform_choices, submit_pool_choices
from workloads.submission import PRIORITY_CLASSES

_MONO = {"class": "mono", "spellcheck": "false"}


def as_yaml(value) -> str:
    """How a stored JSON value is shown for editing (YAML, block style; empty for nothing)."""
    if value in (None, {}, []):
        return ""
    return yaml.safe_dump(value, sort_keys=False, default_flow_style=False, allow_unicode=True)


def as_lines(names) -> str:
    return "\n".join(names)


class _Ordered(forms.CharField):
    """Names, one per line (or comma-separated), in order."""

    def __init__(self, **kwargs):
        kwargs.setdefault("required", False)
        kwargs.setdefault("widget", forms.Textarea(attrs={"rows": 3, **_MONO}))
        super().__init__(**kwargs)

    def to_python(self, value):
        text = super().to_python(value) or ""
        return [name.strip() for name in text.replace(",", "\n").splitlines() if name.strip()]


def _document(label: str, help_text: str, rows: int = 4) -> forms.CharField:
    return forms.CharField(label=label, required=False, help_text=help_text, strip=False,
                           widget=forms.Textarea(attrs={"rows": rows, **_MONO}))


class PlatformForm(forms.Form):
    name = forms.CharField(help_text="Lowercase letters, digits and '-' (a DNS-1123 label), e.g. a100.")
    description = forms.CharField(max_length=2000, required=False, widget=forms.Textarea(attrs={"rows": 2}))
    node_selector = _document("Node selector", "Label key: value (YAML or JSON), e.g. nvidia.com/gpu.product: NVIDIA-A100.")
    tolerations = _document("Tolerations", "A YAML or JSON list of Kubernetes tolerations "
                                           "(key, operator Equal/Exists, value, effect).", rows=6)
    pod_security_level = forms.ChoiceField(
        label="Pod security level", required=False,
        choices=[("", "— the pool's level —")] + list(PodSecurityLevel.choices),
        help_text="The Pod Security Standards level its pods may reach; every submission's pod is checked against "
                  "each control of it. The three allowances below exist only at the privileged level.")
    privileged_allowed = forms.BooleanField(label="Privileged containers allowed", required=False)
    host_network_allowed = forms.BooleanField(label="Host network allowed", required=False)
    allowed_mounts = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 2, **_MONO}),
                                     help_text="Host paths workloads may mount, one per line.")
    default_variables = _document("Default variables", "Overrides the pool's, e.g. USER_MEMORY: 80Gi.")
    override_templates = _Ordered(label="Override pod templates",
                                  help_text="Pod template names, one per line, merged after the pool's common templates.")
    rule_sets = _Ordered(label="Resource validation rule sets", help_text="Rule set names, one per line (after the pool's).")
    make_default = forms.BooleanField(label="The pool's default platform", required=False)
    version = StrictIntegerFormField(widget=forms.HiddenInput, required=False)

    def clean_allowed_mounts(self):
        text = self.cleaned_data.get("allowed_mounts") or ""
        return [line.strip() for line in text.splitlines() if line.strip()]


class PoolSettingsForm(forms.Form):
    default_platform = forms.ChoiceField(required=False, help_text="Used when a submission names no platform.")
    pod_security_level = forms.ChoiceField(
        label="Pod security level", choices=PodSecurityLevel.choices, required=False,
        help_text="Of submissions to the pool without a platform, and where a new platform starts (Kubernetes' "
                  "Pod Security Standards: privileged, baseline, restricted).")
    default_variables = _document("Default variables", "USER_CPU, USER_GPU, USER_MEMORY, USER_STORAGE defaults of "
                                                       "the pool (YAML or JSON), e.g. USER_MEMORY: 32Gi.")
    common_templates = _Ordered(label="Common pod templates", help_text="Pod template names, one per line, in merge order.")
    rule_sets = _Ordered(label="Resource validation rule sets", help_text="Rule set names, one per line, e.g. default_cpu.")
    version = StrictIntegerFormField(widget=forms.HiddenInput, required=False)

    def __init__(self, *args, platforms=(), **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["default_platform"].choices = [("", "—")] + [(p.name, p.name) for p in platforms]


class PodTemplateForm(forms.Form):
    name = forms.CharField(help_text="Letters, digits, '-', '_' or '.', e.g. default_user or a100.")
    description = forms.CharField(max_length=2000, required=False, widget=forms.Textarea(attrs={"rows": 2}))
    body = _document("Template", "A fragment of a Pod in YAML or JSON: spec (nodeSelector, tolerations, containers, "
                                 "volumes, …) and/or metadata; {{ USER_GPU }}, {{ WF_TASK_NAME }}, … are substituted.",
                     rows=16)
    version = StrictIntegerFormField(widget=forms.HiddenInput, required=False)


class RuleSetForm(forms.Form):
    name = forms.CharField(help_text="Letters, digits, '-', '_' or '.', e.g. default_gpu.")
    description = forms.CharField(max_length=2000, required=False, widget=forms.Textarea(attrs={"rows": 2}))
    rules = _document("Rules", "A YAML or JSON list of {operator: GT|GE|LT|LE|EQ, left_operand, right_operand, "
                               "assert_message}; operands are {{USER_*}}, {{K8_*}} or quantities (8, 500m, 32Gi).",
                      rows=14)
    version = StrictIntegerFormField(widget=forms.HiddenInput, required=False)


class ConfirmDeleteForm(forms.Form):
    confirm = forms.BooleanField(initial=True, widget=forms.HiddenInput)

# ---------------------------------------------------------------------------------------------------
# Submission side (pool access, submitting, the workloads table)
class OrderedSelects(forms.Widget):
    """An ordered choice without JavaScript: one select per place (1st, 2nd, ...), each offering every
    choice. Reads `name_0`, `name_1`, ... in order; also `name` as text separated by commas (older
    forms, scripts)."""

    def __init__(self, *, choices=(), size: int = 1, item: str = "item", empty: str = "—", attrs=None):
        super().__init__(attrs)
        self.choices, self.size, self.item, self.empty = list(choices), size, item, empty

    def value_from_datadict(self, data, files, name):
        if f"{name}_0" not in data and name in data:
            return [v.strip() for v in str(data.get(name) or "").split(",")]
        values, index = [], 0
        while f"{name}_{index}" in data and index < 64:
            values.append(data.get(f"{name}_{index}"))
            index += 1
        return values

    def value_omitted_from_data(self, data, files, name):
        return f"{name}_0" not in data and name not in data

    def id_for_label(self, id_):
        return f"{id_}_0" if id_ else id_

    def render(self, name, value, attrs=None, renderer=None):
        chosen = [v for v in (value or []) if v]
        known = [c for c, _ in self.choices]
        # A value no longer offered (e.g. a pool closed meanwhile) stays visible, so that it is not lost.
        choices = self.choices + [(v, f"{v} (not open to this project)") for v in chosen if v not in known]
        base = (attrs or {}).get("id") or f"id_{name}"
        items = []
        for index in range(max(self.size, len(chosen))):
            current = chosen[index] if index < len(chosen) else ""
            options = [format_html('<option value=""{}>{}</option>', mark_safe(" selected") if not current else "",
                                   self.empty)]
            options += [format_html('<option value="{}"{}>{}</option>', c, mark_safe(" selected") if c == current else "",
                                    label) for c, label in choices]
            items.append(format_html(
                '<li><label for="{id}_{i}"><span class="visually-hidden">{item} </span>{n}</label> '
                '<select name="{name}_{i}" id="{id}_{i}">{options}</select></li>',
                id=base, i=index, n=index + 1, item=self.item, name=name, options=mark_safe("".join(options))))
        return format_html('<ol class="ordered-choice">{}</ol>', mark_safe("".join(items)))


class OrderedNamesField(forms.Field):
    """Names in order (empty places skipped). Which names are allowed is the submission's rule
    (workloads.rules through workloads.submission), not this field's: it refuses with its own words."""

    def to_python(self, value):
        if isinstance(value, str):
            value = value.split(",")
        return [str(v).strip() for v in value or [] if v is not None and str(v).strip()]


class OfferedChoiceField(forms.ChoiceField):
    """Offers choices but takes any value: whether it is allowed is the submission's rule, refused in its
    words (e.g. which platforms the first pool has), not "Select a valid choice"."""

    def valid_value(self, value):
        return True


class SubmitForm(forms.Form):
    """What Preview and Submit take (workloads.submission runs the rules). The pools are an ordered choice
    of those open to the chosen project, its priority list first; the platform a choice of the first
    pool's platforms (`submit_choices` in workloads.selectors)."""

    project = forms.ModelChoiceField(queryset=None, empty_label=None)
    pools = OrderedNamesField(
        label="Node pools", required=False,
        help_text="In the order to try them: the project's priority list first; only the pools open to the "
                  "project are offered. None chosen: the project's priority list, then default.")
    platform = OfferedChoiceField(
        required=False, choices=[("", "The first pool's default platform")],
        help_text="A platform of the first pool; the other pools use their platform of the same name, else their "
                  "default one.")
    image = forms.CharField(help_text="Container image, e.g. nvcr.io/nvidia/pytorch:24.05-py3.")
    command = forms.CharField(required=False, help_text="As in a shell, e.g. python train.py --epochs 3.")
    cpu = forms.CharField(label="CPU", required=False, help_text="Cores per pod (USER_CPU), e.g. 4 or 500m.")
    memory = forms.CharField(required=False, help_text="Per pod (USER_MEMORY), e.g. 16Gi.")
    gpus = StrictIntegerFormField(label="GPUs", min_value=0, max_value=64, initial=0,
                              help_text="Per pod (USER_GPU); MIG slices per pod with a MIG profile.")
    gpu_profile = forms.CharField(label="MIG profile", required=False, max_length=32,
                                  help_text="Optional: GPUs are slices of this MIG profile, e.g. 1g.10gb.")
    gpu_fraction = forms.CharField(label="GPU fraction", required=False, max_length=16,
                                   help_text="Optional: a share of one GPU per pod (KAI Scheduler), e.g. 0.5.")
    storage = forms.CharField(required=False, help_text="Ephemeral storage per pod (USER_STORAGE), e.g. 10Gi.")
    priority_class = forms.ChoiceField(label="Priority class", choices=[(c, c) for c in PRIORITY_CLASSES],
                                       initial="train",
                                       help_text="train and build-preemptible may be preempted; build and "
                                                 "inference run within the deserved quota only.")
    pods = StrictIntegerFormField(label="Number of pods", min_value=1, max_value=1000, initial=1)
    name = forms.CharField(required=False, help_text="Empty: the project's name and a random suffix.")
    max_run_minutes = StrictIntegerFormField(
        label="Maximum run time (minutes)", required=False, min_value=1, max_value=43200,
        help_text="Stopped after this long (the Job's activeDeadlineSeconds); empty: no limit. It also tells others "
                  "when the GPUs it holds are free again.")

    PLACEMENT = ("project", "pools", "platform")  # checked together: each one's choices follow the one before

    def __init__(self, *args, projects=None, user=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["project"].queryset = projects
        self.user = user
        self.chosen_project = self._chosen_project(projects)
        self.pool_choices: list = []
        if self.chosen_project is not None and user is not None:
            self.pool_choices = submit_pool_choices(user=user, project=self.chosen_project)
        names = [p.name for p in self.pool_choices]
        self.fields["pools"].widget = OrderedSelects(
            choices=[(n, n) for n in names], size=max(1, min(len(names), 8)), item="Node pool",
            empty="— (none)")
        self._platform_choices()

    def _chosen_project(self, projects):
        key = self.data.get(self.add_prefix("project")) if self.is_bound else None
        key = key if key not in (None, "") else self.initial.get("project")
        if projects is None or key in (None, ""):
            return None
        try:
            return projects.filter(pk=int(getattr(key, "pk", key))).first()
        except (TypeError, ValueError):
            return None

    def chosen_pool_names(self) -> list[str]:
        field = self.fields["pools"]
        if self.is_bound:
            value = field.widget.value_from_datadict(self.data, self.files, self.add_prefix("pools"))
        else:
            value = self.initial.get("pools") or []
        return field.to_python(value)

    def _platform_choices(self) -> None:
        if self.chosen_project is None:
            return
        by_name = {p.name: p for p in self.pool_choices}
        chosen = [by_name[n] for n in self.chosen_pool_names() if n in by_name] or self.pool_choices[:1]
        names, default, owners = submit_platform_choices(chosen)
        first = chosen[0].name if chosen else ""
        empty = (f"{default}: the default platform of {first}" if default
                 else f"none: {first} has no platforms (any of its nodes)" if first and not names
                 else f"the default platform of {first}" if first else "the first pool's default platform")
        field = self.fields["platform"]
        field.choices = [("", empty)] + [
            (n, f"{n} (in {', '.join(owners[n])})" if len(owners[n]) > 1 else n) for n in names]

    def clean_command(self):
        try:  # bounded (at most shell.MAX_COMMAND_CHARS), split in linear time
            return shell.command_from(self.cleaned_data.get("command") or "")
        except shell.CommandError as exc:
            raise forms.ValidationError(str(exc)) from exc
