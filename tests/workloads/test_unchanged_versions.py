"""A write that changes nothing keeps the version (issue: edge values): a pod template, a platform, a
pool's workload settings and a quota sent back as they are (or with fields the API does not know, which
it ignores, as every serializer of the API does) are not "changed by someone else" for the next writer."""
from __future__ import annotations

from decimal import Decimal

import pytest

from audit.models import AuditEvent
from projects.services import quota_update
from workloads import services as config

pytestmark = pytest.mark.django_db


def test_a_patch_of_nothing_keeps_the_pod_templates_and_platforms_version(org, users, api):
    client = api(users["sysadmin"])
    template = client.post("/api/v1/pod-templates/", {"cluster": org.cluster.pk, "name": "h100",
                                                     "body": {"spec": {"nodeSelector": {"a": "b"}}}}, format="json").json()
    platform = config.platform_create(actor=None, pool=org.a100, name="a100-platform")
    updates = AuditEvent.objects.filter(action="update").count()
    for url, same in ((f"/api/v1/pod-templates/{template['id']}/", {"name": "h100"}),
                      (f"/api/v1/platforms/{platform.pk}/", {"name": "a100-platform"})):
        for body in ({}, {"colour": "red"}, same, {**same, "version": 1}):
            response = client.patch(url, body, format="json")
            assert response.status_code == 200, (url, body, response.content)
            assert response.json()["version"] == 1, (url, body)
        # The writer who read version 1 still writes.
        changed = client.patch(url, {"description": "now", "version": 1}, format="json")
        assert changed.status_code == 200 and changed.json()["version"] == 2
    assert AuditEvent.objects.filter(action="update").count() == updates + 2


def test_pool_settings_and_a_quota_written_as_they_are_keep_their_version(org):
    settings = config.pool_settings_update(actor=None, pool=org.a100, pod_security_level="baseline")
    version = settings.version
    again = config.pool_settings_update(actor=None, pool=org.a100, pod_security_level="baseline",
                                        expected_version=version)
    assert again.version == version
    quota = org.quota(org.rnd, org.a100)
    result = quota_update(actor=None, quota=quota, expected_version=quota.version, gpu_deserved=quota.gpu_deserved)
    assert result.quota.version == quota.version
    result = quota_update(actor=None, quota=quota, expected_version=quota.version, gpu_deserved=Decimal(3))
    assert result.quota.version == quota.version + 1


def test_a_pools_access_set_as_it_is_keeps_its_version(org, users):
    from workloads.submission import pool_access_set

    first = pool_access_set(actor=users["sysadmin"], pool=org.a100, open_to_cluster=False, maintenance=False,
                            departments=[org.rnd])
    same = pool_access_set(actor=users["sysadmin"], pool=org.a100, open_to_cluster=False, maintenance=False,
                           departments=[org.rnd])
    assert same.version == first.version
    assert AuditEvent.objects.filter(object_type="poolaccess", action="update").count() == 0
    changed = pool_access_set(actor=users["sysadmin"], pool=org.a100, open_to_cluster=False, maintenance=False,
                              departments=[org.rnd, org.ops])
    assert changed.version == first.version + 1
    changed.refresh_from_db()
    assert changed.version == first.version + 1
    assert AuditEvent.objects.filter(object_type="poolaccess", action="update").count() == 1
