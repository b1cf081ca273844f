"""Who made an object and who schedules a pod (kube.owners): the controller among the ownerReferences, none for
a bare pod; default-scheduler when a pod names no scheduler; malformed references read as none."""
from kube.owners import controller_of, scheduler_of


def test_the_controller_is_the_reference_marked_controller():
    refs = [{"kind": "Node", "name": "n1"}, {"kind": "ReplicaSet", "name": "web-7d9", "controller": True}]
    assert controller_of({"ownerReferences": refs}) == ("ReplicaSet", "web-7d9")
    assert controller_of({"ownerReferences": refs[:1]}) == ("Node", "n1")  # no controller: the first owner
    assert controller_of({}) == ("", "")  # a bare pod


def test_malformed_references_read_as_none():
    assert controller_of({"ownerReferences": "Job/x"}) == ("", "")
    assert controller_of({"ownerReferences": [{"kind": 3, "name": "x"}, None]}) == ("", "")
    assert controller_of(None) == ("", "")


def test_a_pod_without_a_scheduler_name_is_the_default_schedulers():
    assert scheduler_of({"schedulerName": "kai-scheduler"}) == "kai-scheduler"
    assert scheduler_of({}) == scheduler_of({"schedulerName": ""}) == scheduler_of(None) == "default-scheduler"
