"""Valid Kubernetes values only, API and pages alike: image references by the distribution grammar, names
by their DNS rules, no NUL or other control character (refused by one mechanism: the API's parsers and the
pages' middleware), bounded commands and descriptions; a Job over 1.5 MiB is never sent. Nothing is
created in the cluster on a refusal."""
from __future__ import annotations

import pytest
from django.urls import reverse

from tests.hostile.conftest import snapshot

pytestmark = pytest.mark.django_db


def _submit(world, **extra):
    body = {"project": world.org.rnd_a.pk, "pools": ["a100"], "image": "busybox", "name": "job-1"}
    body.update(extra)
    return world.api().post("/api/v1/workloads/", body, format="json")


@pytest.mark.parametrize("image", ["../../etc/passwd", "BusyBox:ÄÖ", "BusyBox", "busybox:" + "x" * 200,
                                   "app@sha256:123", "registry.example.com/a//b"])
def test_an_image_that_is_not_a_reference_is_refused(world, image):
    check = snapshot(world)
    response = _submit(world, image=image)
    assert response.status_code == 400
    [message] = response.json()["errors"]["image"]
    assert message.startswith(f"{image[:200]!r} is not an image reference: ")
    check()


def test_a_valid_image_is_taken_as_written(world):
    image = "registry.example.com:5000/team/train:v2@sha256:" + "ab" * 32
    response = _submit(world, image=image, dry_run=True)
    assert response.status_code == 200, response.content
    assert response.json()["job"]["spec"]["template"]["spec"]["containers"][0]["image"] == image


@pytest.mark.parametrize("command,field", [
    (["echo", "a\x00b"], "command"), ("echo a\x00b", "command"), (["\x1b[31mred"], "command"), ("echo \x7f", "command"),
])
def test_nul_and_control_characters_are_refused_in_the_api(world, command, field):
    check = snapshot(world)
    response = _submit(world, command=command)
    assert response.status_code == 400
    assert list(response.json()["errors"]) == [field]
    assert "control character U+" in response.json()["errors"][field][0]
    check()


def test_tab_and_newlines_are_text(world):
    response = _submit(world, command="echo 'a\tb\nc'\r\n", dry_run=True)
    assert response.status_code == 200, response.content
    assert response.json()["job"]["spec"]["template"]["spec"]["containers"][0]["command"] == ["echo", "a\tb\nc"]


def test_a_2_mb_command_is_refused_and_never_becomes_a_job(world):
    check = snapshot(world)
    response = _submit(world, command="a" * 2_000_000)
    assert response.status_code == 413  # over the body limit, 1 MiB
    response = _submit(world, command=["a" * 60_000, "b" * 6_000])
    assert response.status_code == 400
    assert response.json()["errors"]["command"] == ["The command is 66000 characters long: at most 65536."]
    check()


def test_a_job_over_1_5_mib_is_refused_before_it_is_sent(world):
    """Each template within its limit (64 KiB), but 28 of them make a Job no API server stores: refused at the
    render step, nothing sent."""
    from workloads import services as config

    names = []
    for index in range(28):
        names.append(config.pod_template_create(actor=None, cluster=world.cluster, name=f"env{index}", body={
            "spec": {"containers": [{"name": "main", "env": [{"name": f"E{index}", "value": "v" * 60_000}]}]}}).name)
    config.platform_update(actor=None, platform=world.platform, override_templates=names)
    check = snapshot(world)
    response = _submit(world)
    assert response.status_code == 400
    body = response.json()
    assert body["step"] == "render"
    assert "Kubernetes stores at most 1572864 bytes (1.5 MiB) per object" in body["detail"]
    check()


@pytest.mark.parametrize("name", ["job_1", "Job-1", "-job", "job-", "a" * 53, "job 1", "jöb", "job\n1"])
def test_a_workload_name_follows_the_dns_label_rule(world, name):
    check = snapshot(world)
    response = _submit(world, name=name)
    assert response.status_code == 400
    assert "name" in response.json()["errors"]
    check()


def test_a_template_label_or_container_name_outside_the_rules_is_refused_on_save(world):
    response = world.api().post("/api/v1/pod-templates/", {"cluster": world.cluster.pk, "name": "labels", "body": {
        "metadata": {"labels": {"team/../x": "a", "ok": "no spaces"}},
        "spec": {"containers": [{"name": "Main_Container"}]}}}, format="json")
    assert response.status_code == 400
    [message] = response.json()["errors"]["body"][:1]
    text = " ".join(response.json()["errors"]["body"])
    assert "metadata.labels[team/../x]: Invalid value" in text
    assert "metadata.labels[ok]: Invalid value: 'no spaces'" in text
    assert "spec.containers[0].name: Invalid value: 'Main_Container'" in text


def test_descriptions_are_bounded(world):
    response = world.api().patch(f"/api/v1/departments/{world.org.rnd.pk}/", {"description": "d" * 2001}, format="json")
    assert response.status_code == 400 and "description" in response.json()["errors"]
    response = world.api().patch(f"/api/v1/clusters/{world.cluster.pk}/", {"description": "d" * 2001}, format="json")
    assert response.status_code == 400 and "description" in response.json()["errors"]


# --- Pages: the same rules through the forms -----------------------------------------------------------------

def test_a_nul_in_a_page_form_is_refused_naming_the_field(world, client):
    client.force_login(world.users["researcher"])
    check = snapshot(world)
    response = client.post(reverse("workload-submit"), {
        "project": world.org.rnd_a.pk, "pools": "a100", "image": "busybox", "command": "echo \x00", "gpus": 0,
        "priority_class": "train", "pods": 1, "action": "submit"})
    assert response.status_code == 400
    page = response.content.decode()
    assert "The field “command” cannot be accepted" in page and "U+0000 (NUL)" in page
    check()


def test_an_image_path_in_the_page_form_is_refused_on_its_field(world, client):
    client.force_login(world.users["researcher"])
    check = snapshot(world)
    response = client.post(reverse("workload-submit"), {
        "project": world.org.rnd_a.pk, "pools": "a100", "image": "../../etc/passwd", "gpus": 0,
        "priority_class": "train", "pods": 1, "action": "submit"})
    assert response.status_code == 200
    assert "is not an image reference: invalid reference format" in response.content.decode()
    check()


def test_a_nul_in_a_query_string_is_refused(world, client):
    client.force_login(world.users["sysadmin"])
    response = client.get("/nodes/", {"q": "a\x00b"})
    assert response.status_code == 400 and "The field “q” cannot be accepted" in response.content.decode()
    response = world.api().get("/api/v1/nodes/", {"search": "\x00"})
    assert response.status_code == 400 and list(response.json()["errors"]) == ["search"]


def test_the_admins_json_fields_are_bounded(world, client):
    """The Django admin's editable mirrors (nodes, pods, pools) read JSON with the same bounds: 3,000 levels
    are an error on the field, not a 500."""
    from django.contrib.auth import get_user_model

    staff = get_user_model().objects.create_superuser("staff", password="x")
    client.force_login(staff)
    node = world.node
    page = client.get(f"/admin/nodepools/node/{node.pk}/change/")
    assert page.status_code == 200
    form = {key: value for key, value in page.context["adminform"].form.initial.items() if value is not None}
    form.update({"labels": "[" * 3000 + "]" * 3000, "taints": "[]", "conditions": "[]", "pool_conflicts": "[]",
                 "status_reasons": "[]", "cluster": node.cluster_id, "name": node.name})
    response = client.post(f"/admin/nodepools/node/{node.pk}/change/", form)
    assert response.status_code == 200
    assert "Nested deeper than 64 levels" in response.content.decode()


def test_lists_are_bounded(world):
    """A project's namespaces (each one a LocalQueue in the cluster under Kueue), the pools a submission
    tries, a priority list and a quota write: at most a few hundred items, whatever fits in a body."""
    check = snapshot(world)
    api = world.api()
    response = api.patch(f"/api/v1/projects/{world.org.rnd_a.pk}/", {"namespaces": [f"n{i}" for i in range(101)]},
                         format="json")
    assert response.status_code == 400 and "namespaces" in response.json()["errors"]
    response = _submit(world, pools=[f"p{i}" for i in range(101)])
    assert response.status_code == 400 and response.json()["errors"]["pools"] == [
        "Ensure this field has no more than 100 elements."]
    response = api.put(f"/api/v1/projects/{world.org.rnd_a.pk}/priority/", {"pools": list(range(1, 1002))},
                       format="json")
    assert response.status_code == 400 and "pools" in response.json()["errors"]
    check()
