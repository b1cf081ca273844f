"""Platforms, pool settings, pod templates and rule sets as stored: validated on save with a message
naming the field, nothing stored on bad input, audited, concurrent changes detected; and what the
selectors compute from the mirrored nodes (a platform's nodes, free GPUs, validation per node)."""
from __future__ import annotations

import pytest
from django.core.exceptions import PermissionDenied, ValidationError

from audit.models import AuditEvent
from common.exceptions import ConcurrentUpdate
from workloads import engine, selectors, services
from workloads.models import Platform, PodTemplate, PoolWorkloadSettings, ResourceValidationRuleSet

pytestmark = pytest.mark.django_db


def test_a_new_cluster_gets_osmos_shipped_rule_sets(cluster):
    names = set(ResourceValidationRuleSet.objects.filter(cluster=cluster).values_list("name", flat=True))
    assert {"default_cpu", "default_memory", "default_storage", "default_gpu"} <= names
    memory = ResourceValidationRuleSet.objects.get(cluster=cluster, name="default_memory")
    assert memory.parsed_rules()[0] == engine.Rule("LT", "{{USER_MEMORY}}", "{{K8_MEMORY}}",
                                                   "Memory {{USER_MEMORY}} exceeds node capacity {{K8_MEMORY}}")
    # Running it again adds nothing.
    assert services.workloads_defaults(cluster=cluster) == []


# ---------------------------------------------------------------------------------------------------
# Pod templates

def test_pod_template_from_yaml_is_stored_as_a_mapping_and_audited(org, users):
    text = "spec:\n  nodeSelector:\n    nvidia.com/gpu.product: NVIDIA-L40S\n"
    template = services.pod_template_create(actor=users["sysadmin"], cluster=org.cluster, name="l40s", body=text)
    assert PodTemplate.objects.get(pk=template.pk).body == {"spec": {"nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-L40S"}}}
    event = AuditEvent.objects.get(object_type="podtemplate", action=AuditEvent.Action.CREATE)
    assert event.actor == users["sysadmin"] and event.after["name"] == "l40s"


@pytest.mark.parametrize("body, words", [
    ("spec:\n  nodeSelector: [unclosed\n", "Not valid JSON or YAML at line"),
    ("- a\n- list\n", "Must be a mapping"),
    ('{"spec": {"containers": {"name": "main"}}}', "spec.containers: must be a list."),
    ('{"nodeSelector": {"a": "b"}}', "put Pod spec fields such as 'nodeSelector' under 'spec'"),
    ('{"spec": {"tolerations": [{"key": "a", "operator": "Sometimes"}]}}', "spec.tolerations[0].operator: Unsupported value"),
    ('{"spec": {"containers": [{"name": "{{ gpu }}"}]}}', "'{{ gpu }}': not a variable"),
])
def test_malformed_pod_template_is_refused_and_nothing_stored(org, body, words):
    with pytest.raises(ValidationError) as caught:
        services.pod_template_create(actor=None, cluster=org.cluster, name="broken", body=body)
    assert any(words in message for message in caught.value.message_dict["body"])
    assert not PodTemplate.objects.filter(name="broken").exists()
    assert not AuditEvent.objects.filter(object_type="podtemplate").exists()


def test_only_system_administrators_configure(org, users):
    for role in ("rnd_admin", "proj_admin", "researcher", "cluster_viewer"):
        with pytest.raises(PermissionDenied):
            services.pod_template_create(actor=users[role], cluster=org.cluster, name="x", body={})
        with pytest.raises(PermissionDenied):
            services.platform_create(actor=users[role], pool=org.a100, name="x")
    assert not PodTemplate.objects.exists() and not Platform.objects.exists()


def test_a_concurrent_change_of_a_template_is_detected(org):
    template = services.pod_template_create(actor=None, cluster=org.cluster, name="t", body={"spec": {}})
    services.pod_template_update(actor=None, template=template, expected_version=1, description="first")
    with pytest.raises(ConcurrentUpdate):
        services.pod_template_update(actor=None, template=template, expected_version=1, description="second")
    assert PodTemplate.objects.get(pk=template.pk).description == "first"


def test_a_template_in_use_cannot_be_deleted(hetero):
    with pytest.raises(ValidationError) as caught:
        services.pod_template_delete(actor=None, template=hetero.a100)
    assert "used by platform 'a100-platform' of pool 'hetero'" in str(caught.value)
    assert PodTemplate.objects.filter(pk=hetero.a100.pk).exists()


# ---------------------------------------------------------------------------------------------------
# Rule sets

def test_malformed_rule_set_names_the_rule_and_field(org):
    rules = "- operator: LE\n  left_operand: '{{USER_GPU}}'\n  right_operand: '{{K8_GPU}}'\n" \
            "- operator: NE\n  left_operand: '{{USER_GPU}}'\n  right_operand: '8'\n"
    with pytest.raises(ValidationError) as caught:
        services.rule_set_create(actor=None, cluster=org.cluster, name="max_8_gpu", rules=rules)
    assert caught.value.message_dict["rules"] == ["rules[1].operator: 'NE' is not one of GT, GE, LT, LE, EQ."]
    assert not ResourceValidationRuleSet.objects.filter(name="max_8_gpu").exists()


def test_rule_set_is_stored_under_osmos_keys(org):
    rule_set = services.rule_set_create(actor=None, cluster=org.cluster, name="a100_validation", rules=[
        {"operator": "le", "left": "USER_GPU", "right": "8", "message": "A100 platform supports max 8 GPUs"}])
    assert rule_set.rules == [{"operator": "LE", "left_operand": "USER_GPU", "right_operand": "8",
                               "assert_message": "A100 platform supports max 8 GPUs"}]


# ---------------------------------------------------------------------------------------------------
# Platforms and the pool's settings

def test_the_first_platform_becomes_the_pools_default(hetero):
    settings = PoolWorkloadSettings.objects.get(pool=hetero.pool)
    assert settings.default_platform == hetero.l40s_platform
    services.pool_settings_update(actor=None, pool=hetero.pool, default_platform="a100-platform")
    settings.refresh_from_db()
    assert settings.default_platform == hetero.a100_platform
    with pytest.raises(ValidationError) as caught:
        services.pool_settings_update(actor=None, pool=hetero.pool, default_platform="h100-platform")
    assert caught.value.message_dict["default_platform"] == ["Pool 'hetero' has no platform 'h100-platform'."]


@pytest.mark.parametrize("values, field, words", [
    ({"override_templates": ["a100", "missing"]}, "override_templates", "No pod template named 'missing'"),
    ({"rule_sets": ["nope"]}, "rule_sets", "No rule set named 'nope'"),
    ({"tolerations": "- key: a\n  operator: Sometimes\n"}, "tolerations", "tolerations[0].operator: Unsupported value"),
    ({"node_selector": "nvidia.com/gpu.product: [x]"}, "node_selector", "a label value must be a string"),
    ({"allowed_mounts": ["data"]}, "allowed_mounts", "a host path must be absolute"),
    ({"default_variables": {"USER_MEMORY": "lots"}}, "default_variables", "USER_MEMORY: quantities must match"),
    ({"name": "A100_platform"}, "name", "start and end with a letter or digit; at most 63 characters (“A100_platform” holds capital letters and '_')."),
])
def test_bad_platform_input_names_the_field_and_creates_nothing(hetero, values, field, words):
    args = {"name": "new-platform"} | values
    with pytest.raises(ValidationError) as caught:
        services.platform_create(actor=None, pool=hetero.pool, **args)
    assert any(words in message for message in caught.value.message_dict[field]), caught.value.message_dict
    assert Platform.objects.filter(pool=hetero.pool).count() == 2


def test_platform_update_keeps_order_of_templates_and_is_audited(hetero, users):
    services.platform_update(actor=users["sysadmin"], platform=hetero.a100_platform,
                             override_templates=["l40s", "a100"], expected_version=1)
    assert [t.name for t in Platform.objects.get(pk=hetero.a100_platform.pk).ordered_templates()] == ["l40s", "a100"]
    event = AuditEvent.objects.filter(object_type="platform", action=AuditEvent.Action.UPDATE).latest("pk")
    assert event.before["override_templates"] == ["a100"] and event.after["override_templates"] == ["l40s", "a100"]
    with pytest.raises(ConcurrentUpdate):
        services.platform_update(actor=users["sysadmin"], platform=hetero.a100_platform, description="x",
                                 expected_version=1)


# ---------------------------------------------------------------------------------------------------
# What the selectors compute from the mirror

def test_platform_nodes_gpus_and_per_node_resources(hetero, users):
    data = selectors.pool_platforms(user=users["researcher"], pool=hetero.pool)
    by_name = {s.platform.name: s for s in data.platforms}
    assert [n.name for n in by_name["a100-platform"].nodes] == ["a100-big", "a100-small"]
    assert [n.name for n in by_name["l40s-platform"].nodes] == ["l40s-1"]
    assert (by_name["a100-platform"].gpus_total, by_name["a100-platform"].gpus_free) == (10, 4)
    assert (by_name["l40s-platform"].gpus_total, by_name["l40s-platform"].gpus_free) == (4, 4)
    assert by_name["l40s-platform"].is_default
    rows = {r.node.name: r for r in data.rows}
    assert rows["a100-big"].platforms == ["a100-platform"]
    assert rows["a100-big"].gpus_used == 6 and rows["a100-small"].gpus_used == 0
    # Both run the same NVIDIA operands; a100-big also runs the 8-core, 64Gi job.
    assert rows["a100-big"].cpu_used_millis - rows["a100-small"].cpu_used_millis == 8000
    assert rows["a100-big"].memory_used_bytes - rows["a100-small"].memory_used_bytes == 64 * 2**30
    assert rows["a100-big"].node.cpu_allocatable_millis == 64000 and rows["a100-big"].node.gpu_allocatable == 8
    assert data.common_templates == ["default_user"] and data.rule_sets == ["default_cpu", "default_memory"]


def test_platform_config_merges_the_pools_templates_then_the_platforms(hetero):
    config = selectors.platform_config(platform=hetero.a100_platform)
    assert [name for name, _ in config.templates] == ["default_user", "a100"]
    assert [name for name, _ in config.rule_sets] == ["default_cpu", "default_memory", "default_gpu"]
    variables = engine.resolve_variables(pool_defaults=config.pool_defaults, platform_defaults=config.platform_defaults,
                                         user_values={"USER_GPU": 2}) | {"WF_TASK_NAME": "train"}
    assert variables["USER_CPU"] == "2" and variables["USER_MEMORY"] == "8Gi"
    pod = engine.substitute(engine.merge_templates(config.templates), variables, template="a100")
    assert pod["spec"]["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-A100"}
    assert pod["spec"]["tolerations"][0]["value"] == "NVIDIA-A100"
    assert pod["spec"]["containers"][0]["resources"]["limits"] == {"cpu": "2", "memory": "8Gi", "nvidia.com/gpu": "2"}


def test_validation_against_the_platforms_free_gpus(hetero):
    config = selectors.platform_config(platform=hetero.a100_platform)
    values = engine.resolve_variables(pool_defaults=config.pool_defaults, platform_defaults={}, user_values={"USER_GPU": 2})
    # 2 GPUs are free on each A100 node: satisfied.
    assert engine.check_rules(config.rules, values=values, nodes=config.nodes) == []
    values["USER_GPU"] = "3"
    failure, = engine.check_rules(config.rules, values=values, nodes=config.nodes)
    assert failure.message == "GPU 3 exceeds node capacity 2"
    assert failure.reasons == ("a100-big: K8_GPU 2 < USER_GPU 3", "a100-small: K8_GPU 2 < USER_GPU 3")


def test_deleting_the_default_platform_makes_the_next_one_default(hetero, users):
    services.platform_delete(actor=users["sysadmin"], platform=hetero.l40s_platform)
    assert not Platform.objects.filter(name="l40s-platform").exists()
    assert PoolWorkloadSettings.objects.get(pool=hetero.pool).default_platform == hetero.a100_platform
    deleted = AuditEvent.objects.get(object_type="platform", action=AuditEvent.Action.DELETE)
    assert deleted.before["name"] == "l40s-platform" and deleted.actor == users["sysadmin"]
    changed = AuditEvent.objects.filter(object_type="poolworkloadsettings").latest("pk")
    assert changed.after["default_platform_id"] == hetero.a100_platform.pk
