"""The audit trail: every audited write recorded with who, when, through what, before and after."""
import pytest

from audit.context import via
from audit.models import AuditEvent
from nodepools import services as pool_services
from projects import services


def events(**filters):
    return list(AuditEvent.objects.filter(**filters).order_by("pk"))


def test_quota_update_records_actor_channel_and_values(org, users):
    quota = org.quota(org.rnd_a, org.default)
    with via("page"):
        services.quota_update(actor=users["rnd_admin"], quota=quota, expected_version=1, gpu_deserved="1.5")
    [event] = events(object_type="quota")
    assert (event.actor_name, event.via, event.action) == ("rnd-admin", "page", "update")
    assert (event.before["gpu_deserved"], event.after["gpu_deserved"]) == ("0.000", "1.500")
    assert (event.cluster_id, event.department_id) == (org.cluster.pk, org.rnd.pk)


def test_pool_lifecycle_is_recorded(org, users):
    admin = users["sysadmin"]
    with via("api"):
        pool = pool_services.pool_create(actor=admin, cluster=org.cluster, name="h100", label_key="gpu-type", label_value="H100")
        pool_services.pool_update(actor=admin, pool=pool, description="H100s")
        pk = pool.pk
        pool_services.pool_delete(actor=admin, pool=pool)
    recorded = [(e.action, e.via, e.object_repr) for e in events(object_type="nodepool", object_id=str(pk))]
    assert recorded == [("create", "api", "h100"), ("update", "api", "h100"), ("delete", "api", "h100")]
    delete = events(object_type="nodepool", action="delete")[-1]
    assert delete.before["label_value"] == "H100" and delete.after is None


def test_commands_and_system_writes_are_recorded_as_command(cluster):
    [event] = events(object_type="cluster")
    assert (event.via, event.actor_name, event.action) == ("command", "", "create")


def test_an_update_that_changes_nothing_is_not_recorded(org):
    services.project_update(actor=None, project=org.rnd_a, description="")
    assert events(object_type="project", action="update") == []


def test_role_assignments_and_project_changes_are_recorded(org, users):
    services.project_namespaces_set(actor=users["rnd_admin"], project=org.rnd_a, namespaces=["rnd-a", "shared-a"])
    [event] = events(object_type="project", action="update")
    assert (event.before["namespaces"], event.after["namespaces"]) == (["runai-rnd-a"], ["rnd-a", "shared-a"])
    assert events(object_type="roleassignment", action="create")


def test_the_trail_is_append_only(org):
    event = AuditEvent.objects.first()
    with pytest.raises(TypeError):
        event.save()
    with pytest.raises(TypeError):
        event.delete()
    with pytest.raises(TypeError):
        AuditEvent.objects.all().delete()
    with pytest.raises(TypeError):
        AuditEvent.objects.update(actor_name="x")


def test_department_administrators_read_their_departments_events_only(org, users):
    services.quota_update(actor=None, quota=org.quota(org.ops_a, org.default), expected_version=1, gpu_deserved=1)
    services.quota_update(actor=None, quota=org.quota(org.rnd_a, org.default), expected_version=1, gpu_deserved=1)
    visible = AuditEvent.objects.restrict(users["rnd_admin"], "view").filter(object_type="quota")
    assert [e.object_repr for e in visible] == ["rnd-a in default"]
    assert AuditEvent.objects.restrict(users["sysadmin"], "view").filter(object_type="quota").count() == 2
    for role in ("rnd_viewer", "researcher", "proj_admin", "nobody"):
        assert not AuditEvent.objects.restrict(users[role], "view").exists()
