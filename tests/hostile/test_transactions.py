"""Nothing that parses or checks user input runs inside a transaction: the SQLite settings open every
transaction with BEGIN IMMEDIATE (the write lock), so a slow parse there held the lock and the sync
logged "database is locked". The parsers are watched while every service that takes a document (and the
NodePool checks) runs for real, outside any test transaction (transaction=True), each recording whether a
transaction was open when it ran."""
from __future__ import annotations

import pytest
from django.db import connection

from common import parsing
from provisioning import validation

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def watched(monkeypatch):
    calls: list[tuple[str, bool]] = []

    def watch(module, name):
        original = getattr(module, name)

        def spy(*args, **kwargs):
            calls.append((name, connection.in_atomic_block))
            return original(*args, **kwargs)

        monkeypatch.setattr(module, name, spy)

    for name in ("loads_document", "check_yaml_events", "check_value", "loads_json"):
        watch(parsing, name)
    watch(validation, "spec_errors")
    return calls


def test_documents_are_parsed_before_any_transaction_opens(org, users, api, watched):
    from workloads import services as config

    template = config.pod_template_create(actor=None, cluster=org.cluster, name="t", body="spec:\n  nodeSelector: {a: b}\n")
    config.pod_template_update(actor=None, template=template, body="spec: {}\n")
    rules = "- {operator: LE, left_operand: '{{USER_GPU}}', right_operand: '4'}\n"
    rule_set = config.rule_set_create(actor=None, cluster=org.cluster, name="r", rules=rules)
    config.rule_set_update(actor=None, rule_set=rule_set, rules=rules)
    platform = config.platform_create(actor=None, pool=org.a100, name="p", node_selector="gpu-type: A100\n",
                                      tolerations="[]", default_variables="USER_GPU: 1\n")
    config.platform_update(actor=None, platform=platform, node_selector="{}", default_variables="{}")
    config.pool_settings_update(actor=None, pool=org.a100, default_variables="USER_CPU: 2\n")
    response = api(users["sysadmin"]).post("/api/v1/pod-templates/", {
        "cluster": org.cluster.pk, "name": "api", "body": "spec: {}\n"}, format="json")
    assert response.status_code == 201
    assert {name for name, _ in watched} >= {"loads_document", "check_yaml_events", "check_value", "loads_json"}
    assert [call for call in watched if call[1]] == [], "parsed while a transaction (the write lock) was open"


def test_a_nodepool_is_checked_before_any_transaction_opens(org, watched):
    from django.core.exceptions import ValidationError

    from provisioning import services

    spec = {"template": {"spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass",
                                                   "name": "../../etc"}, "requirements": []}}}
    with pytest.raises(ValidationError):
        services.provisioned_pool_create(actor=None, cluster=org.cluster, name="spot", spec=spec)
    with pytest.raises(ValidationError):
        services.karpenter_nodepool_create(actor=None, cluster=org.cluster, name="spot", spec=spec)
    assert watched == [("spec_errors", False), ("spec_errors", False)]
