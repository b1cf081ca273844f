"""Property-based fuzzing of the REST API against its own OpenAPI schema (schemathesis, in-process WSGI).

As a system administrator (personal API token), every operation gets a few generated requests on a
fixed seed: with random ids, and with the ids of real objects so that writes reach the services. No
response may be a 5xx, and every response must match the schema (status code, content type, headers,
body). Budget: MAX_EXAMPLES per operation and id kind, derandomized (same cases every run).
"""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, Phase, given, settings

MAX_EXAMPLES = 6

# Which real object each collection's `{id}` names in the second pass.
REAL_IDS = {
    "clusters": "cluster", "node-pools": "a100", "nodes": "node", "departments": "rnd", "projects": "rnd_a",
    "quotas": "quota", "role-assignments": "assignment", "audit-events": "event", "usage-snapshots": "snapshot",
    "platforms": "platform", "pod-templates": "pod_template", "rule-sets": "rule_set", "workloads": "workload",
    "ledger-entries": "ledger_entry", "rates": "rate",
}


@pytest.fixture
def no_connection_closing():
    """In-process WSGI fires request_started / request_finished, which close the database connection
    (and with it the test's transaction on PostgreSQL); Django's own test client mutes them the same way."""
    from django.core.signals import request_finished, request_started
    from django.db import close_old_connections

    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


@pytest.fixture
def fuzz_world(org, users, no_connection_closing):
    from accounts.services import token_create
    from audit.models import AuditEvent
    from access.models import RoleAssignment
    from usage.models import UsageSnapshot
    from usage.services import usage_snapshot_take

    org.run("train-1", org.rnd_a, "a100-1", gpus=2)
    usage_snapshot_take()
    from workloads import services as workload_services
    from workloads.models import ResourceValidationRuleSet, Workload

    pod_template = workload_services.pod_template_create(actor=None, cluster=org.cluster, name="a100", body={"spec": {}})
    platform = workload_services.platform_create(actor=None, pool=org.a100, name="a100-platform",
                                                 override_templates=["a100"])
    import datetime
    from decimal import Decimal

    from django.utils import timezone
    from ledger.models import LedgerEntry
    from ledger.services import hour_floor, ledger_hour_close, rate_create

    ledger_hour_close(cluster=org.cluster, hour=hour_floor(timezone.now()))  # (train-1 runs from now on)
    rate = rate_create(actor=None, gpu_model="NVIDIA-A100-SXM4-40GB", currency="EUR",
                       valid_from=datetime.date(2026, 1, 1), gpu_hour=Decimal("2.1"))
    _, raw = token_create(actor=users["sysadmin"], name="fuzz")
    ids = {
        "cluster": org.cluster.pk, "a100": org.a100.pk, "node": org.cluster.nodes.first().pk, "rnd": org.rnd.pk,
        "rnd_a": org.rnd_a.pk, "quota": org.quota(org.rnd_a, org.a100).pk,
        "assignment": RoleAssignment.objects.filter(project=org.rnd_a).first().pk,
        "event": AuditEvent.objects.first().pk, "snapshot": UsageSnapshot.objects.first().pk,
        "platform": platform.pk, "pod_template": pod_template.pk,
        "rule_set": ResourceValidationRuleSet.objects.get(cluster=org.cluster, name="default_gpu").pk,
        # A Job as the sync mirrors it (stopping it meets an unreachable cluster: a documented 503).
        "workload": Workload.objects.create(cluster=org.cluster, namespace="runai-rnd-a", name="job-a").pk,
        "ledger_entry": LedgerEntry.objects.first().pk, "rate": rate.pk,
    }
    return {"headers": {"Authorization": f"Bearer {raw}"}, "ids": ids}


def operations():
    import schemathesis

    from console.wsgi import application

    schema = schemathesis.openapi.from_wsgi("/api/schema/", application)
    return [result.ok() for result in schema.get_all_operations()]


def test_api_conforms_to_its_schema_and_never_fails_with_5xx(fuzz_world):
    from schemathesis.checks import not_a_server_error
    from schemathesis.specs.openapi.checks import (
        content_type_conformance, response_headers_conformance, response_schema_conformance, status_code_conformance,
    )

    checks = [not_a_server_error, status_code_conformance, content_type_conformance, response_headers_conformance,
              response_schema_conformance]
    failures: list[str] = []
    ops = operations()
    assert len(ops) >= 40, [op.label for op in ops]
    # Reads first, deletes last, so that the real objects live through the other writes.
    order = {"get": 0, "post": 1, "put": 1, "patch": 1, "delete": 2}
    for op in sorted(ops, key=lambda o: order.get(o.method.lower(), 1)):
        collection = op.path.split("/")[3]
        passes = [None]
        if "{id}" in op.path:
            passes.append({"id": fuzz_world["ids"][REAL_IDS[collection]]})
        for path_parameters in passes:
            strategy = op.as_strategy(path_parameters=path_parameters) if path_parameters else op.as_strategy()

            @settings(max_examples=MAX_EXAMPLES, derandomize=True, database=None, deadline=None,
                      suppress_health_check=list(HealthCheck), phases=[Phase.explicit, Phase.generate])
            @given(case=strategy)
            def run(case):
                case.call_and_validate(headers=fuzz_world["headers"], checks=checks)

            try:
                run()
            except Exception as exc:  # collect every operation's failure, then report them together
                failures.append(f"{op.label} ids={path_parameters}: {type(exc).__name__}: {str(exc)[:1500]}")
    assert not failures, "\n\n".join(failures)
