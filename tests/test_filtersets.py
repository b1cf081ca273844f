"""The shared FilterSets filter rows and never offer choices the user may not see."""
from django.test import RequestFactory

from nodepools.filtersets import NodeFilterSet
from nodepools.models import Node
from projects.filtersets import QuotaFilterSet
from projects.models import Quota


def request_as(user, **params):
    request = RequestFactory().get("/", params)
    request.user = user
    return request


def test_node_filters_by_pool_status_gpu_type_and_search(org, users):
    org.nodes[0]["spec"]["unschedulable"] = True
    org.load()
    nodes = Node.objects.all()
    by_pool = NodeFilterSet({"pool": [org.a100.pk]}, queryset=nodes, request=request_as(users["sysadmin"])).qs
    assert sorted(n.name for n in by_pool) == ["a100-1", "a100-2"]
    not_ready = NodeFilterSet({"status": ["not_ready"]}, queryset=nodes, request=request_as(users["sysadmin"])).qs
    assert [n.name for n in not_ready] == ["v100-1"]
    reason = NodeFilterSet({"reason": "Scheduling disabled"}, queryset=nodes, request=request_as(users["sysadmin"])).qs
    assert [n.name for n in reason] == ["v100-1"]
    search = NodeFilterSet({"q": "A100-SXM4"}, queryset=nodes, request=request_as(users["sysadmin"])).qs
    assert sorted(n.name for n in search) == ["a100-1", "a100-2"]


def test_filter_choices_are_restricted_to_the_user(org, users):
    from nodepools import services

    services.cluster_create(actor=None, name="secret")
    filterset = NodeFilterSet({}, queryset=Node.objects.all(), request=request_as(users["rnd_viewer"]))
    assert [str(c) for c in filterset.form.fields["cluster"].queryset] == ["lab"]
    quota_filter = QuotaFilterSet({}, queryset=Quota.objects.all(), request=request_as(users["rnd_viewer"]))
    assert [str(d) for d in quota_filter.form.fields["department"].queryset] == ["rnd"]


def test_choosing_an_invisible_object_is_a_validation_error(org, users):
    filterset = QuotaFilterSet({"department": [org.ops.pk]}, queryset=Quota.objects.restrict(users["rnd_viewer"]),
                               request=request_as(users["rnd_viewer"]))
    assert not filterset.is_valid()
    assert "department" in filterset.errors


def test_quota_filter_by_department_includes_its_projects(org, users):
    qs = QuotaFilterSet({"department": [org.rnd.pk], "pool": [org.default.pk]}, queryset=Quota.objects.all(),
                        request=request_as(users["sysadmin"])).qs
    assert sorted(str(q.owner) for q in qs) == ["rnd", "rnd-a", "rnd-b"]
