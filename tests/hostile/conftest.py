"""The hostile-input suite's world: the org of tests/conftest.py on the emulator (cluster `lab`), one object
of every kind an endpoint names, and the measures every case takes (rows stored, objects in the cluster)."""
from __future__ import annotations

import datetime
from decimal import Decimal

import pytest
from django.apps import apps

from tests.workloads.conftest import lab  # noqa: F401  (fixture: the org on the emulator)

# A pod template of about 500 bytes whose nested aliases expand to 9^9 = 387 million strings.
BOMB = "\n".join(
    ["a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    + [f"{name}: &{name} [{', '.join(['*' + prev] * 9)}]" for prev, name in zip("abcdefgh", "bcdefghi")]
)
DEEP_YAML = "spec: " + "[" * 10_000 + "]" * 10_000
DEEP_JSON = "[" * 3_000 + "]" * 3_000


def nested_json(levels: int) -> str:
    return "[" * levels + "]" * levels


def row_counts() -> dict[str, int]:
    """Rows of every model of the console (the audit trail and sessions included)."""
    return {model._meta.label: model._default_manager.count() for model in apps.get_models()}


class World:
    def __init__(self, org, users, sim):
        from accounts.services import token_create
        from ledger.services import rate_create
        from workloads import services as config
        from workloads.models import ResourceValidationRuleSet, Workload

        self.org, self.users, self.sim = org, users, sim
        self.cluster = org.cluster
        self.pod_template = config.pod_template_create(actor=None, cluster=org.cluster, name="a100",
                                                       body={"spec": {"nodeSelector": {"gpu-type": "A100"}}})
        self.platform = config.platform_create(actor=None, pool=org.a100, name="a100-platform",
                                               override_templates=["a100"])
        self.rule_set = ResourceValidationRuleSet.objects.get(cluster=org.cluster, name="default_gpu")
        self.node = org.cluster.nodes.get(name="a100-1")
        self.workload = Workload.objects.create(cluster=org.cluster, namespace="runai-rnd-a", name="job-a")
        self.token = token_create(actor=users["sysadmin"], name="hostile")[1]
        self.rate = rate_create(actor=None, gpu_model="NVIDIA-A100-SXM4-80GB", currency="EUR",
                                valid_from=datetime.date(2026, 1, 1), gpu_hour=Decimal("2.5"))

    def api(self):
        from rest_framework.test import APIClient

        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {self.token}")
        return client


@pytest.fixture
def world(lab, users, sim):  # noqa: F811
    return World(lab, users, sim)


@pytest.fixture(scope="module")
def kept_world(kept_db, module_emulators, tmp_path_factory):
    """`world`, built once for a module whose tests each send requests that are refused or whose rows are rolled
    back (`kept_db`); what they write in the emulator stays for the module's next tests."""
    from nodepools import services as pool_services
    from tests.conftest import Org, role_users
    from tests.workloads.conftest import on_emulator

    with kept_db.unblock():
        org = Org(pool_services.cluster_create(actor=None, name="lab"))
        sim = module_emulators()
        on_emulator(org, sim, tmp_path_factory.mktemp("hostile") / "kubeconfig")
        return World(org, role_users(org), sim)


def snapshot(world):
    """Returns `check()`: no row stored or removed and nothing written to the cluster since the snapshot,
    and the server still answers the next request."""
    before_rows = row_counts()
    before_rv = world.sim._rv

    def check(client=None):
        assert row_counts() == before_rows
        assert world.sim._rv == before_rv, "something was written to the cluster"
        response = (client or world.api()).get("/api/v1/clusters/")
        assert response.status_code == 200

    return check
