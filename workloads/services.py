"""Every write to platforms, pool workload settings, pod templates and resource validation rule sets.

Who may configure workloads of a cluster is decided by `access.rules.access_q` (system administrators;
roles granting `platform.change` etc. in a cluster scope). Bodies of pod templates are JSON or YAML,
validated on save (a Pod-spec fragment); rule sets are checked rule by rule (operator, variables,
quantities). A bad value raises ValidationError keyed by the field, and nothing is stored. Writes carry
the version they were read at: a concurrent change raises ConcurrentUpdate.
"""
from __future__ import annotations

import json
from typing import Any, Callable, Iterable

import orjson
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.db.models import F

from access.rules import RestrictedQuerySet, access_q
from audit.models import AuditEvent
from audit.services import audit_record, snapshot
from common import parsing
from common.exceptions import ConcurrentUpdate
from nodepools.models import Cluster, NodePool
from workloads import engine
from workloads.models import (
    Platform, PlatformRuleSet, PlatformTemplate, PodTemplate, PoolRuleSet, PoolTemplate, PoolWorkloadSettings,
    ResourceValidationRuleSet,
)


class _ClusterScope(RestrictedQuerySet):
    """Access paths of a cluster row, for the checks of writes that have no object yet."""

    access_level = "cluster"
    access_paths = {"cluster": ["pk"]}


def may_configure(user: Any, cluster: Cluster | int, model: str = "platform", action: str = "change") -> bool:
    """Whether the user may add/change/delete `model` (platform, podtemplate, ...) in this cluster."""
    if user is None:
        return True
    cluster_id = cluster if isinstance(cluster, int) else cluster.pk
    return Cluster.objects.filter(pk=cluster_id).filter(access_q(user, _ClusterScope, f"{model}.{action}")).exists()


def _require(actor: Any, cluster_id: int, model: str, action: str, what: str) -> None:
    if not may_configure(actor, cluster_id, model, action):
        raise PermissionDenied(f"Only system administrators may {what}.")


def _check_version(obj: Any, expected_version: int | None, what: str) -> None:
    if expected_version is not None and obj.version != expected_version:
        raise ConcurrentUpdate(
            f"{what} was changed by someone else meanwhile (version {obj.version}, you edited version "
            f"{expected_version}). Nothing was saved: reload to see the current values.",
            current_version=obj.version,
        )


def _bump(obj: Any) -> None:
    obj.version = F("version") + 1
    obj.save()
    obj.refresh_from_db()


# ---------------------------------------------------------------------------------------------------
# Text a person typed: JSON or YAML

def parse_document(text: Any, *, field: str, expect: type = dict) -> Any:
    """A JSON or YAML document from a form or API (already-parsed values are checked the same way).

    Bounded (common/parsing.py): at most MAX_DOCUMENT_CHARS characters, 64 levels of nesting, no YAML
    anchors or aliases (refused before anything is composed), no NUL or other control characters.
    Raises ValidationError({field: ...}) naming the line of a syntax error, the rule, or the type expected.
    Call it before opening a transaction: parsing never runs while a write lock is held."""
    try:
        if isinstance(text, str):
            value = parsing.loads_document(text, field=field) if text.strip() else expect()
        else:
            value = text
            parsing.check_value(value, field=field)
            size = len(orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS)) if value is not None else 0
            if size > parsing.MAX_DOCUMENT_CHARS:
                raise parsing.InputError(field, f"At most {parsing.MAX_DOCUMENT_CHARS} characters of JSON "
                                                f"(got {size}).")
            # What JSON can hold: NaN and infinities are refused.
            value = json.loads(json.dumps(value, default=str, allow_nan=False))
    except parsing.InputError as exc:
        raise ValidationError({field: exc.message}) from exc
    except (ValueError, TypeError) as exc:
        raise ValidationError({field: f"Cannot be stored as JSON: {exc}."}) from exc
    if value is None:
        value = expect()
    if not isinstance(value, expect):
        kind = "a mapping (key: value)" if expect is dict else "a list"
        raise ValidationError({field: f"Must be {kind}, not {type(value).__name__}."})
    return value


# ---------------------------------------------------------------------------------------------------
# Shipped defaults

@transaction.atomic
def workloads_defaults(*, cluster: Cluster, actor: Any = None) -> list[ResourceValidationRuleSet]:
    """OSMO's shipped rule sets (default_cpu, default_gpu, default_memory, default_storage) in the
    cluster, for those not there yet. Run for every new cluster and by the demo."""
    existing = set(ResourceValidationRuleSet.objects.filter(cluster=cluster).values_list("name", flat=True))
    created = []
    for name, rules in engine.DEFAULT_RULE_SETS.items():
        if name in existing:
            continue
        rule_set = ResourceValidationRuleSet(
            cluster=cluster, name=name, rules=rules,
            description="Shipped with the console (OSMO's default resource validation).",
        )
        rule_set.full_clean()
        rule_set.save()
        audit_record(actor=actor, action=AuditEvent.Action.CREATE, obj=rule_set, after=snapshot(rule_set))
        created.append(rule_set)
    return created


# ---------------------------------------------------------------------------------------------------
# Pod templates

def in_use_by(template_or_set: Any) -> list[str]:
    """Where a pod template or rule set is listed: pools and platforms, by name."""
    users = [f"pool '{link.settings.pool.name}'" for link in template_or_set.pool_links.select_related("settings__pool")]
    users += [f"platform '{link.platform.name}' of pool '{link.platform.pool.name}'"
              for link in template_or_set.platform_links.select_related("platform__pool")]
    return users


def pod_template_create(*, actor: Any, cluster: Cluster, name: str, body: Any, description: str = "") -> PodTemplate:
    """A named Pod-spec fragment (JSON or YAML text, or a dict). Parsed and checked before the
    transaction opens: no write lock is held while a document is read."""
    _require(actor, cluster.pk, "podtemplate", "add", "add pod templates")
    template = PodTemplate(cluster=cluster, name=name, description=description,
                           body=parse_document(body, field="body"))
    template.full_clean()
    with transaction.atomic():
        template.save()
        audit_record(actor=actor, action=AuditEvent.Action.CREATE, obj=template, after=snapshot(template))
    return template


POD_TEMPLATE_EDITABLE = {"name", "description", "body"}


def _library_update(*, actor: Any, obj: Any, expected_version: int | None, changes: dict[str, Any],
                    editable: set[str], normalise: tuple[str, Callable[[Any], Any]], perm: str, what: str,
                    label: str) -> Any:
    """Change a pod template or a rule set (the same steps for both): only `editable` fields, the
    `normalise`d one parsed first — before the transaction, so no write lock is held while it is read —
    then the version checked under a row lock, audited."""
    _require(actor, obj.cluster_id, perm, "change", f"change {what}")
    unknown = set(changes) - editable
    if unknown:
        raise ValidationError({field: "This field cannot be changed." for field in sorted(unknown)})
    field, parse = normalise
    if field in changes:
        changes[field] = parse(changes[field])
    with transaction.atomic():
        current = type(obj).objects.select_for_update().get(pk=obj.pk)
        _check_version(current, expected_version, f"{label} '{current.name}'")
        before = snapshot(current)
        for name, value in changes.items():
            setattr(current, name, value)
        current.full_clean()
        if snapshot(current) == before:
            return current  # nothing changed: same version, nothing audited
        _bump(current)
        audit_record(actor=actor, action=AuditEvent.Action.UPDATE, obj=current, before=before, after=snapshot(current))
    return current


def _library_delete(*, actor: Any, obj: Any, perm: str, what: str, label: str, field: str, lists: str) -> None:
    """Delete a pod template or a rule set unless a pool's or platform's list still names it; audited."""
    _require(actor, obj.cluster_id, perm, "delete", f"delete {what}")
    users = in_use_by(obj)
    if users:
        raise ValidationError({field: f"{label} '{obj.name}' is used by {', '.join(users)}: "
                                      f"remove it from their {lists} first."})
    before, pk = snapshot(obj), obj.pk
    obj.delete()
    audit_record(actor=actor, action=AuditEvent.Action.DELETE, obj=obj, before=before, object_id=pk)


def pod_template_update(*, actor: Any, template: PodTemplate, expected_version: int | None = None,
                        **changes: Any) -> PodTemplate:
    return _library_update(actor=actor, obj=template, expected_version=expected_version, changes=changes,
                           editable=POD_TEMPLATE_EDITABLE, normalise=("body", lambda v: parse_document(v, field="body")),
                           perm="podtemplate", what="pod templates", label="Pod template")


@transaction.atomic
def pod_template_delete(*, actor: Any, template: PodTemplate) -> None:
    _library_delete(actor=actor, obj=template, perm="podtemplate", what="pod templates", label="Pod template",
                    field="template", lists="template lists")


# ---------------------------------------------------------------------------------------------------
# Resource validation rule sets

def rule_set_create(*, actor: Any, cluster: Cluster, name: str, rules: Any, description: str = "") -> ResourceValidationRuleSet:
    _require(actor, cluster.pk, "resourcevalidationruleset", "add", "add resource validation rule sets")
    rule_set = ResourceValidationRuleSet(cluster=cluster, name=name, description=description,
                                         rules=_normalised_rules(rules))
    rule_set.full_clean()
    with transaction.atomic():
        rule_set.save()
        audit_record(actor=actor, action=AuditEvent.Action.CREATE, obj=rule_set, after=snapshot(rule_set))
    return rule_set


def _normalised_rules(rules: Any) -> list[dict]:
    """Rules stored under OSMO's keys (operator, left_operand, right_operand, assert_message)."""
    raw = parse_document(rules, field="rules", expect=list)
    try:
        return [rule.as_json() for rule in engine.parse_rules(raw)]
    except engine.RuleError as exc:
        raise ValidationError({"rules": str(exc)}) from exc


RULE_SET_EDITABLE = {"name", "description", "rules"}


def rule_set_update(*, actor: Any, rule_set: ResourceValidationRuleSet, expected_version: int | None = None,
                    **changes: Any) -> ResourceValidationRuleSet:
    return _library_update(actor=actor, obj=rule_set, expected_version=expected_version, changes=changes,
                           editable=RULE_SET_EDITABLE, normalise=("rules", _normalised_rules),
                           perm="resourcevalidationruleset", what="resource validation rule sets", label="Rule set")


@transaction.atomic
def rule_set_delete(*, actor: Any, rule_set: ResourceValidationRuleSet) -> None:
    _library_delete(actor=actor, obj=rule_set, perm="resourcevalidationruleset", what="resource validation rule sets",
                    label="Rule set", field="rule_set", lists="rule set lists")


# ---------------------------------------------------------------------------------------------------
# Ordered lists of templates and rule sets

def _resolve_named(model: type, cluster_id: int, items: Iterable[Any], field: str, kind: str) -> list:
    """Templates / rule sets of the cluster from names (or objects), in the order given."""
    if isinstance(items, str):
        items = [name.strip() for name in items.replace("\n", ",").split(",") if name.strip()]
    items = list(items or [])
    names = [item.name if isinstance(item, model) else str(item) for item in items]
    found = {obj.name: obj for obj in model.objects.filter(cluster_id=cluster_id, name__in=names)}
    missing = [name for name in names if name not in found]
    if missing:
        raise ValidationError({field: f"No {kind} named {', '.join(repr(n) for n in missing)} in this cluster."})
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise ValidationError({field: f"{kind.capitalize()} {', '.join(repr(n) for n in duplicates)} is listed twice."})
    return [found[name] for name in names]


def _set_links(link_model: type, owner_field: str, owner: Any, target_field: str, targets: list) -> None:
    link_model.objects.filter(**{owner_field: owner}).delete()
    link_model.objects.bulk_create(
        [link_model(**{owner_field: owner, target_field: target, "position": index}) for index, target in enumerate(targets)]
    )


# ---------------------------------------------------------------------------------------------------
# Platforms

PLATFORM_FIELDS = {"name", "description", "node_selector", "tolerations", "pod_security_level", "privileged_allowed",
                   "host_network_allowed", "allowed_mounts", "default_variables"}
_PLATFORM_JSON = {"node_selector": dict, "tolerations": list, "allowed_mounts": list, "default_variables": dict}


def _platform_snapshot(platform: Platform) -> dict:
    values = snapshot(platform)
    values["override_templates"] = [t.name for t in platform.ordered_templates()]
    values["rule_sets"] = [r.name for r in platform.ordered_rule_sets()]
    return values


def _parsed_platform_values(values: dict) -> dict:
    """The platform's documents parsed and checked (before any transaction opens)."""
    parsed = {}
    for field, value in values.items():
        if field in _PLATFORM_JSON:
            value = parse_document(value, field=field, expect=_PLATFORM_JSON[field])
            if field == "allowed_mounts":
                value = [str(path).strip() for path in value]
        parsed[field] = value
    return parsed


def _apply_platform_values(platform: Platform, values: dict) -> None:
    for field, value in values.items():
        setattr(platform, field, value)


def platform_create(*, actor: Any, pool: NodePool, name: str, override_templates: Iterable[Any] = (),
                    rule_sets: Iterable[Any] = (), make_default: bool = False, **values: Any) -> Platform:
    """A platform inside a pool; the pool's first platform becomes its default. Its documents are parsed
    before the transaction opens."""
    _require(actor, pool.cluster_id, "platform", "add", "add platforms")
    unknown = set(values) - PLATFORM_FIELDS
    if unknown:
        raise ValidationError({field: "Not a platform field." for field in sorted(unknown)})
    values = _parsed_platform_values(values)
    return _platform_create(actor=actor, pool=pool, name=name, override_templates=override_templates,
                            rule_sets=rule_sets, make_default=make_default, values=values)


@transaction.atomic
def _platform_create(*, actor: Any, pool: NodePool, name: str, override_templates: Iterable[Any],
                     rule_sets: Iterable[Any], make_default: bool, values: dict) -> Platform:
    platform = Platform(pool=pool, name=name)
    if "pod_security_level" not in values:
        # A new platform starts at its pool's level (the pool's workload settings; baseline without them).
        pool_level = PoolWorkloadSettings.objects.filter(pool=pool).values_list("pod_security_level", flat=True).first()
        platform.pod_security_level = pool_level or Platform._meta.get_field("pod_security_level").default
    _apply_platform_values(platform, values)
    platform.full_clean()
    templates = _resolve_named(PodTemplate, pool.cluster_id, override_templates, "override_templates", "pod template")
    sets = _resolve_named(ResourceValidationRuleSet, pool.cluster_id, rule_sets, "rule_sets", "rule set")
    platform.save()
    _set_links(PlatformTemplate, "platform", platform, "template", templates)
    _set_links(PlatformRuleSet, "platform", platform, "rule_set", sets)
    audit_record(actor=actor, action=AuditEvent.Action.CREATE, obj=platform, after=_platform_snapshot(platform))
    settings, _ = PoolWorkloadSettings.objects.select_for_update().get_or_create(pool=pool)
    if make_default or settings.default_platform_id is None:
        before = snapshot(settings)
        settings.default_platform = platform
        settings.full_clean()
        _bump(settings)
        audit_record(actor=actor, action=AuditEvent.Action.UPDATE, obj=settings, before=before, after=snapshot(settings))
    return platform


def platform_update(*, actor: Any, platform: Platform, expected_version: int | None = None,
                    override_templates: Iterable[Any] | None = None, rule_sets: Iterable[Any] | None = None,
                    **values: Any) -> Platform:
    _require(actor, platform.pool.cluster_id, "platform", "change", "change platforms")
    unknown = set(values) - PLATFORM_FIELDS
    if unknown:
        raise ValidationError({field: "Not a platform field." for field in sorted(unknown)})
    values = _parsed_platform_values(values)
    return _platform_update(actor=actor, platform=platform, expected_version=expected_version,
                            override_templates=override_templates, rule_sets=rule_sets, values=values)


@transaction.atomic
def _platform_update(*, actor: Any, platform: Platform, expected_version: int | None,
                     override_templates: Iterable[Any] | None, rule_sets: Iterable[Any] | None,
                     values: dict) -> Platform:
    current = Platform.objects.select_for_update().select_related("pool").get(pk=platform.pk)
    _check_version(current, expected_version, f"Platform '{current.name}'")
    before = _platform_snapshot(current)
    _apply_platform_values(current, values)
    current.full_clean()
    cluster_id = current.pool.cluster_id
    if override_templates is not None:
        templates = _resolve_named(PodTemplate, cluster_id, override_templates, "override_templates", "pod template")
    if rule_sets is not None:
        sets = _resolve_named(ResourceValidationRuleSet, cluster_id, rule_sets, "rule_sets", "rule set")
    if override_templates is not None:
        _set_links(PlatformTemplate, "platform", current, "template", templates)
    if rule_sets is not None:
        _set_links(PlatformRuleSet, "platform", current, "rule_set", sets)
    if _platform_snapshot(current) == before:
        return current  # nothing changed: same version, nothing audited
    _bump(current)
    audit_record(actor=actor, action=AuditEvent.Action.UPDATE, obj=current, before=before, after=_platform_snapshot(current))
    return current


@transaction.atomic
def platform_delete(*, actor: Any, platform: Platform) -> None:
    """Delete a platform; when it was the pool's default, the pool's next platform (by name) becomes it."""
    _require(actor, platform.pool.cluster_id, "platform", "delete", "delete platforms")
    pool = platform.pool
    before, pk = _platform_snapshot(platform), platform.pk
    platform.delete()
    audit_record(actor=actor, action=AuditEvent.Action.DELETE, obj=platform, before=before, object_id=pk)
    settings = PoolWorkloadSettings.objects.filter(pool=pool).first()
    if settings is not None and settings.default_platform_id is None:
        successor = pool.platforms.order_by("name").first()
        if successor is not None:
            before = snapshot(settings)
            settings.default_platform = successor
            _bump(settings)
            audit_record(actor=actor, action=AuditEvent.Action.UPDATE, obj=settings, before=before,
                         after=snapshot(settings))


# ---------------------------------------------------------------------------------------------------
# A pool's workload settings

POOL_SETTINGS_FIELDS = {"default_platform", "default_variables", "common_templates", "rule_sets", "pod_security_level"}


def _settings_snapshot(settings: PoolWorkloadSettings) -> dict:
    values = snapshot(settings)
    values["common_templates"] = [t.name for t in settings.ordered_templates()]
    values["rule_sets"] = [r.name for r in settings.ordered_rule_sets()]
    return values


def pool_settings_update(*, actor: Any, pool: NodePool, expected_version: int | None = None,
                         **changes: Any) -> PoolWorkloadSettings:
    """Change a pool's default platform (a platform of the pool, by name or object), default
    variables, common templates and rule sets (ordered lists of names). The default variables are
    parsed before the transaction opens."""
    _require(actor, pool.cluster_id, "poolworkloadsettings", "change", "change a pool's workload settings")
    unknown = set(changes) - POOL_SETTINGS_FIELDS
    if unknown:
        raise ValidationError({field: "Not a pool workload setting." for field in sorted(unknown)})
    if "default_variables" in changes:
        changes["default_variables"] = parse_document(changes["default_variables"], field="default_variables")
    return _pool_settings_update(actor=actor, pool=pool, expected_version=expected_version, changes=changes)


@transaction.atomic
def _pool_settings_update(*, actor: Any, pool: NodePool, expected_version: int | None,
                          changes: dict) -> PoolWorkloadSettings:
    PoolWorkloadSettings.objects.get_or_create(pool=pool)
    current = PoolWorkloadSettings.objects.select_for_update().get(pool=pool)
    _check_version(current, expected_version, f"The workload settings of pool '{pool.name}'")
    before = _settings_snapshot(current)
    if "default_platform" in changes:
        value = changes["default_platform"]
        if value in (None, ""):
            current.default_platform = None
        elif isinstance(value, Platform):
            current.default_platform = value
        else:
            lookup = {"pk": value} if isinstance(value, int) and not isinstance(value, bool) else {"name": str(value)}
            found = pool.platforms.filter(**lookup).first()
            if found is None:
                raise ValidationError({"default_platform": f"Pool '{pool.name}' has no platform {value!r}."})
            current.default_platform = found
    if "default_variables" in changes:
        current.default_variables = changes["default_variables"]
    if "pod_security_level" in changes:
        current.pod_security_level = changes["pod_security_level"]
    current.full_clean()
    if "common_templates" in changes:
        templates = _resolve_named(PodTemplate, pool.cluster_id, changes["common_templates"], "common_templates", "pod template")
    if "rule_sets" in changes:
        sets = _resolve_named(ResourceValidationRuleSet, pool.cluster_id, changes["rule_sets"], "rule_sets", "rule set")
    if "common_templates" in changes:
        _set_links(PoolTemplate, "settings", current, "template", templates)
    if "rule_sets" in changes:
        _set_links(PoolRuleSet, "settings", current, "rule_set", sets)
    if _settings_snapshot(current) == before:
        return current  # nothing changed: same version, nothing audited
    _bump(current)
    audit_record(actor=actor, action=AuditEvent.Action.UPDATE, obj=current, before=before, after=_settings_snapshot(current))
    return current


# ---------------------------------------------------------------------------------------------------
# Stopping a workload: its Job deleted (workloads.submission.workload_stop), and who stopped it on its
# timeline (the console's own fact; the sync then sees the Job leave the cluster and marks it Stopped).


def workload_stop(*, actor: Any, workload: Any, api_client: Any) -> None:
    """Stop the workload (delete its Job and its pods) and note on its timeline that `actor` stopped it.
    Refuses (PermissionDenied) whoever may not stop it; a workload already ended is not stopped again."""
    from django.utils import timezone

    from workloads import selectors, submission
    from workloads.models import WorkloadEvent, WorkloadEventKind

    submission.require_stop(actor, workload)
    if workload.gone_at is not None or workload.phase in selectors.ENDED:
        raise ValidationError({"non_field_errors": [f"Workload {workload.name} has already ended "
                                                    f"({workload.phase}): there is nothing to stop."]})
    submission.workload_stop(actor=actor, workload=workload, api_client=api_client)
    with transaction.atomic():
        event = WorkloadEvent(cluster_id=workload.cluster_id, namespace=workload.namespace, name=workload.name,
                              job_uid=workload.uid, kind=WorkloadEventKind.STOP_REQUESTED, at=timezone.now(),
                              actor=getattr(actor, "username", "") or "")
        event.full_clean()
        event.save()
