"""A dry run whose quantities are past what a float holds is refused naming the field (issue: edge
values): 1e309 bytes of storage is not a workload that "starts now"."""
from __future__ import annotations

import pytest

from workloads.models import Workload

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("field,value", [("storage", "1e309"), ("memory", "1e400"), ("cpu", "２"),
                                         ("storage", "1e1000")])
def test_a_quantity_past_a_float_is_refused_naming_the_field(org, users, api, field, value):
    body = {"project": org.rnd_a.pk, "pools": ["a100"], "image": "busybox", "gpus": 1, "cpu": "1", "memory": "1Gi",
            "dry_run": True, field: value}
    response = api(users["researcher"]).post("/api/v1/workloads/", body, format="json")
    assert response.status_code == 400, response.content
    assert list(response.json()["errors"]) == [field]
    assert "verdict" not in response.json()
    assert not Workload.objects.exists()


def test_a_storage_within_a_float_still_gets_a_verdict(org, users, api):
    body = {"project": org.rnd_a.pk, "pools": ["a100"], "image": "busybox", "gpus": 1, "cpu": "1", "memory": "1Gi",
            "dry_run": True, "storage": "10Gi"}
    response = api(users["researcher"]).post("/api/v1/workloads/", body, format="json")
    assert response.status_code == 200 and response.json()["verdict"]["verdict"]
