"""Bad input answered with a clear message naming the field and the step, and nothing created (no Job
in the cluster, no audit event): unknown platform, unknown project or pool, a template using a
variable nobody defines, a malformed template, a template that would set `privileged` where the
platform does not allow it, a request no node of the platform can hold. And a platform inside a pool
narrows the pool's affinity term to its nodes and adds its tolerations."""
from __future__ import annotations

import pytest

from audit.models import AuditEvent
from workloads import services as config
from workloads.models import PodTemplate, ResourceValidationRuleSet

pytestmark = pytest.mark.django_db

A100_40 = "NVIDIA-A100-SXM4-40GB"


@pytest.fixture
def hetero(lab):
    """a100 with a platform `a100-40gb` (its GPU type, tolerating a taint) as the default."""
    config.platform_create(actor=None, pool=lab.a100, name="a100-40gb", node_selector={"nvidia.com/gpu.product": A100_40},
                           tolerations=[{"key": "dedicated", "operator": "Equal", "value": "a100", "effect": "NoSchedule"}])
    return lab


def post(api, user, project, **extra):
    body = {"project": project.pk, "pools": ["a100"], "image": "busybox", "name": "job-1"}
    body.update(extra)
    return api(user).post("/api/v1/workloads/", body, format="json")


def nothing_created(sim):
    assert sim.list("jobs.batch") == []
    assert not AuditEvent.objects.filter(object_type="workload").exists()


def test_the_platform_narrows_the_pool_term_and_adds_its_tolerations(hetero, users, api, sim):
    response = post(api, users["researcher"], hetero.rnd_a, pools=["a100", "default"], dry_run=True)
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["platform"] == "a100-40gb"
    pod = body["job"]["spec"]["template"]["spec"]
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms[0] == {"matchExpressions": [{"key": "gpu-type", "operator": "In", "values": ["A100"]},
                                             {"key": "nvidia.com/gpu.product", "operator": "In", "values": [A100_40]}]}
    assert {"key": "dedicated", "operator": "Equal", "value": "a100", "effect": "NoSchedule"} in pod["tolerations"]
    assert body["job"]["metadata"]["annotations"]["console.gpu-capacity.io/platform"] == "a100-40gb"
    nothing_created(sim)


def test_unknown_platform(hetero, users, api, sim):
    response = post(api, users["researcher"], hetero.rnd_a, platform="h100")
    assert response.status_code == 400
    assert response.json()["errors"] == {
        "platform": ["Pool a100 has no platform named 'h100' (its platforms: a100-40gb)."]}
    assert response.json()["step"] == "platform"
    assert response.json()["detail"] == ("Refused at the platform step: Pool a100 has no platform named 'h100' "
                                         "(its platforms: a100-40gb).")
    nothing_created(sim)


def test_unknown_project_and_unknown_pool(hetero, users, api, sim):
    response = post(api, users["researcher"], hetero.rnd_a, pools=["a100", "h100"])
    assert response.status_code == 400
    assert response.json()["errors"] == {"pools": ["No node pool named h100 in cluster lab."]}
    response = api(users["researcher"]).post("/api/v1/workloads/", {"project": 987654, "image": "busybox"},
                                              format="json")
    assert response.status_code == 400 and "project" in response.json()["errors"]
    # A project the user cannot see is as unknown as one that does not exist.
    response = post(api, users["researcher"], hetero.ops_a)
    assert response.status_code == 400 and "project" in response.json()["errors"]
    nothing_created(sim)


def test_unreadable_resources_name_their_field(hetero, users, api, sim):
    response = post(api, users["researcher"], hetero.rnd_a, cpu="12x", priority_class="urgent")
    assert response.status_code == 400
    errors = response.json()["errors"]
    assert "priority_class" in errors
    response = post(api, users["researcher"], hetero.rnd_a, cpu="12x")
    assert response.json()["errors"] == {"cpu": ["'12x' is not a Kubernetes quantity (e.g. 500m, 2, 1Gi, 512Mi)."]}
    nothing_created(sim)


def test_a_template_using_an_unknown_variable_names_it_and_the_template(hetero, users, api, sim):
    template = config.pod_template_create(actor=None, cluster=hetero.cluster, name="scratch", body={
        "spec": {"containers": [{"name": "main", "env": [{"name": "SCRATCH", "value": "{{ USER_SCRATCH }}"}]}]}})
    config.pool_settings_update(actor=None, pool=hetero.a100, common_templates=[template.name])
    response = post(api, users["researcher"], hetero.rnd_a)
    assert response.status_code == 400
    [message] = response.json()["errors"]["platform"]
    assert message.startswith("Pod template 'scratch' uses the unknown variable 'USER_SCRATCH'")
    assert response.json()["step"] == "templates"
    nothing_created(sim)


def test_a_malformed_template_is_refused(hetero, users, api, sim):
    template = config.pod_template_create(actor=None, cluster=hetero.cluster, name="broken",
                                          body={"spec": {"containers": [{"name": "main"}]}})
    config.pool_settings_update(actor=None, pool=hetero.a100, common_templates=[template.name])
    # Stored before validation existed (or edited behind the console's back): containers is not a list.
    PodTemplate.objects.filter(pk=template.pk).update(body={"spec": {"containers": "main"}})
    response = post(api, users["researcher"], hetero.rnd_a)
    assert response.status_code == 400
    [message] = response.json()["errors"]["platform"]
    assert message.startswith("Pod template broken is malformed:")
    nothing_created(sim)


def test_a_template_setting_privileged_needs_a_platform_that_allows_it(hetero, users, api, sim):
    template = config.pod_template_create(actor=None, cluster=hetero.cluster, name="privileged", body={
        "spec": {"containers": [{"name": "main", "securityContext": {"privileged": True}}]}})
    platform = hetero.a100.platforms.get(name="a100-40gb")
    config.platform_update(actor=None, platform=platform, override_templates=[template.name])
    # The platform's level (baseline, the default) forbids privileged containers: refused at the pod security step.
    response = post(api, users["researcher"], hetero.rnd_a)
    assert response.status_code == 400 and response.json()["step"] == "pod security"
    path = "spec.template.spec.containers[0].securityContext.privileged"
    assert list(response.json()["errors"]) == [path]
    assert response.json()["errors"][path][0].startswith(f"Privileged Containers: {path} is true")
    nothing_created(sim)
    # The flag exists only at the privileged level; there, without it, the platform refuses.
    response = api(users["sysadmin"]).patch(f"/api/v1/platforms/{platform.pk}/", {"privileged_allowed": True},
                                            format="json")
    assert response.status_code == 400
    assert response.json()["errors"]["privileged_allowed"] == [
        "Privileged containers are allowed only at the pod security level privileged; this platform's level is baseline."]
    config.platform_update(actor=None, platform=platform, pod_security_level="privileged")
    response = post(api, users["researcher"], hetero.rnd_a)
    assert response.status_code == 400 and response.json()["step"] == "platform"
    [message] = response.json()["errors"]["platform"]
    assert message == ("Container 'main' (containers) sets securityContext.privileged, but this platform "
                       "does not allow privileged containers.")
    nothing_created(sim)
    config.platform_update(actor=None, platform=platform, privileged_allowed=True)
    response = post(api, users["researcher"], hetero.rnd_a, dry_run=True)
    assert response.status_code == 200, response.content
    container = response.json()["job"]["spec"]["template"]["spec"]["containers"][0]
    assert container["securityContext"] == {"privileged": True} and container["image"] == "busybox"


def test_resource_validation_reports_the_rule_and_why_each_node_fails(hetero, users, api, sim):
    rule_set = ResourceValidationRuleSet.objects.get(cluster=hetero.cluster, name="default_gpu")
    config.pool_settings_update(actor=None, pool=hetero.a100, rule_sets=[rule_set.name])
    response = post(api, users["researcher"], hetero.rnd_a, gpus=8)
    assert response.status_code == 400
    [message] = response.json()["errors"]["resources"]
    # In words first: what was asked, which pool cannot give it and what its nodes have free.
    assert message.startswith("8 GPUs requested: no node of pool a100 has that many free. The most free on one node "
                              "is 4 GPUs, of its 4; free per node now: a100-1 4 of 4, a100-2 4 of 4. "), message
    # Then, for the administrator, the rule's own message and its variables per node.
    assert "The pool's rule: GPU 8 exceeds node capacity 4 (a100-1: K8_GPU 4 < USER_GPU 8" in message
    assert response.json()["step"] == "resource validation"
    assert "a100-1:" in message and "a100-2:" in message
    nothing_created(sim)
    assert post(api, users["researcher"], hetero.rnd_a, gpus=4, dry_run=True).status_code == 200


def test_the_first_failing_step_is_reported(hetero, users, api, sim):
    """Access comes before the platform: a pool in maintenance is what the researcher hears about."""
    from workloads.submission import pool_access_set

    pool_access_set(actor=users["sysadmin"], pool=hetero.a100, open_to_cluster=True, maintenance=True)
    response = post(api, users["researcher"], hetero.rnd_a, platform="h100")
    assert list(response.json()["errors"]) == ["pools"] and response.json()["step"] == "access"
    assert response.json()["errors"]["pools"][0].startswith("Pool a100 is in maintenance")
    nothing_created(sim)


def test_the_page_names_the_step_and_the_field_and_keeps_the_input(hetero, users, client, sim):
    from django.urls import reverse

    client.force_login(users["researcher"])
    response = client.post(reverse("workload-submit"), {
        "project": hetero.rnd_a.pk, "pools": "a100", "platform": "h100", "image": "busybox", "gpus": 1,
        "priority_class": "train", "pods": 1, "action": "submit"})
    page = response.content.decode()
    assert response.status_code == 200
    assert "Stopped at the platform step." in page
    assert "Platform: Pool a100 has no platform named &#x27;h100&#x27; (its platforms: a100-40gb)." in page
    assert 'value="busybox"' in page and 'id="job-yaml"' not in page
    nothing_created(sim)
