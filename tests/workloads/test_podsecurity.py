"""The Pod Security Standards on every submission: the page's own list of controls
(https://kubernetes.io/docs/concepts/security/pod-security-standards/), one case each, at each level,
through the real submission service (the preview runs every step; nothing reaches a cluster), and a few
through the API.

Each case starts from a pod that meets `restricted` (non-root, seccomp RuntimeDefault, every capability
dropped, no privilege escalation) and changes the one field of its control. A case of a `baseline`
control is refused at baseline and restricted and taken at privileged; a case of a `restricted` control
is refused at restricted and taken at baseline. The refusal names the step, the control and the field's
path in the Job.
"""
from __future__ import annotations

import copy
from typing import Callable

import pytest

from workloads import podsecurity, services as config, submission
from workloads.models import Platform

# The org and logins built once for the module (tests/conftest.py, `kept_org`): each test's rows are rolled back.
pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("kept_org")]

T = "spec.template.spec"
RESTRICTED_POD = {
    "spec": {
        "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [{"name": "main", "securityContext": {"allowPrivilegeEscalation": False,
                                                            "capabilities": {"drop": ["ALL"]}}}],
    },
}


def _container(pod, index=0):
    return pod["spec"]["containers"][index]


def _context(pod, index=0):
    return _container(pod, index)["securityContext"]


def _init(pod):
    """A second, init container that meets restricted too (to spoil)."""
    pod["spec"]["initContainers"] = [{"name": "setup", "image": "busybox", "securityContext": {
        "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}}]
    return pod["spec"]["initContainers"][0]


def _ephemeral(pod):
    pod["spec"]["ephemeralContainers"] = [{"name": "debug", "image": "busybox", "securityContext": {
        "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}}]
    return pod["spec"]["ephemeralContainers"][0]


# (level, control, how the pod is spoiled, the path the refusal names)
CASES: list[tuple[str, str, Callable[[dict], None], str]] = [
    ("baseline", "HostProcess",
     lambda p: p["spec"]["securityContext"].update(windowsOptions={"hostProcess": True}),
     f"{T}.securityContext.windowsOptions.hostProcess"),
    ("baseline", "Host Namespaces", lambda p: p["spec"].update(hostPID=True), f"{T}.hostPID"),
    ("baseline", "Privileged Containers", lambda p: _context(p).update(privileged=True),
     f"{T}.containers[0].securityContext.privileged"),
    ("baseline", "Capabilities", lambda p: _context(p)["capabilities"].update(add=["SYS_ADMIN"]),
     f"{T}.containers[0].securityContext.capabilities.add"),
    ("baseline", "HostPath Volumes", lambda p: p["spec"].update(volumes=[{"name": "etc", "hostPath": {"path": "/etc"}}]),
     f"{T}.volumes[0].hostPath"),
    ("baseline", "Host Ports", lambda p: _container(p).update(ports=[{"containerPort": 80, "hostPort": 8080}]),
     f"{T}.containers[0].ports[0].hostPort"),
    ("baseline", "Host Probes / Lifecycle Hooks",
     lambda p: _container(p).update(livenessProbe={"httpGet": {"host": "10.0.0.1", "port": 80, "path": "/"}}),
     f"{T}.containers[0].livenessProbe.httpGet.host"),
    ("baseline", "AppArmor", lambda p: p["spec"]["securityContext"].update(appArmorProfile={"type": "Unconfined"}),
     f"{T}.securityContext.appArmorProfile.type"),
    ("baseline", "SELinux", lambda p: _context(p).update(seLinuxOptions={"type": "spc_t"}),
     f"{T}.containers[0].securityContext.seLinuxOptions.type"),
    ("baseline", "/proc Mount Type", lambda p: _context(p).update(procMount="Unmasked"),
     f"{T}.containers[0].securityContext.procMount"),
    ("baseline", "Seccomp", lambda p: p["spec"]["securityContext"].update(seccompProfile={"type": "Unconfined"}),
     f"{T}.securityContext.seccompProfile.type"),
    ("baseline", "Sysctls",
     lambda p: p["spec"]["securityContext"].update(sysctls=[{"name": "kernel.msgmax", "value": "65536"}]),
     f"{T}.securityContext.sysctls[0].name"),
    ("restricted", "Volume Types",
     lambda p: p["spec"].update(volumes=[{"name": "data", "nfs": {"server": "nfs.example.com", "path": "/data"}}]),
     f"{T}.volumes[0].nfs"),
    ("restricted", "Privilege Escalation", lambda p: _context(p).update(allowPrivilegeEscalation=True),
     f"{T}.containers[0].securityContext.allowPrivilegeEscalation"),
    ("restricted", "Running as Non-root", lambda p: p["spec"]["securityContext"].update(runAsNonRoot=False),
     f"{T}.securityContext.runAsNonRoot"),
    ("restricted", "Running as Non-root user", lambda p: _context(p).update(runAsUser=0),
     f"{T}.containers[0].securityContext.runAsUser"),
    ("restricted", "Seccomp", lambda p: p["spec"]["securityContext"].pop("seccompProfile"),
     f"{T}.containers[0].securityContext.seccompProfile.type"),
    ("restricted", "Capabilities", lambda p: _context(p)["capabilities"].update(add=["CHOWN"]),
     f"{T}.containers[0].securityContext.capabilities.add"),
]
# The same controls in init and ephemeral containers, and the other fields of a few controls.
MORE_CASES = [
    ("baseline", "Privileged Containers", lambda p: _init(p)["securityContext"].update(privileged=True),
     f"{T}.initContainers[0].securityContext.privileged"),
    ("baseline", "Capabilities", lambda p: _ephemeral(p)["securityContext"]["capabilities"].update(add=["NET_ADMIN"]),
     f"{T}.ephemeralContainers[0].securityContext.capabilities.add"),
    ("baseline", "Host Namespaces", lambda p: p["spec"].update(hostNetwork=True), f"{T}.hostNetwork"),
    ("baseline", "Host Namespaces", lambda p: p["spec"].update(hostIPC=True), f"{T}.hostIPC"),
    ("baseline", "SELinux", lambda p: p["spec"]["securityContext"].update(seLinuxOptions={"user": "system_u"}),
     f"{T}.securityContext.seLinuxOptions.user"),
    ("baseline", "Host Probes / Lifecycle Hooks",
     lambda p: _container(p).update(lifecycle={"preStop": {"tcpSocket": {"host": "metadata", "port": 80}}}),
     f"{T}.containers[0].lifecycle.preStop.tcpSocket.host"),
    ("restricted", "Privilege Escalation", lambda p: _init(p)["securityContext"].pop("allowPrivilegeEscalation"),
     f"{T}.initContainers[0].securityContext.allowPrivilegeEscalation"),
    ("restricted", "Capabilities", lambda p: _ephemeral(p)["securityContext"]["capabilities"].update(drop=[]),
     f"{T}.ephemeralContainers[0].securityContext.capabilities.drop"),
    ("restricted", "Running as Non-root user", lambda p: p["spec"]["securityContext"].update(runAsUser=0),
     f"{T}.securityContext.runAsUser"),
]
LEVEL_BELOW = {"baseline": "privileged", "restricted": "baseline"}


def test_one_case_for_each_control_of_the_page():
    assert [(level, control) for level, control, _, _ in CASES] == list(podsecurity.CONTROLS)


@pytest.fixture
def pss(org):
    """Pool a100 with one platform whose override template is the pod to spoil; at the privileged level the
    platform also allows what only that level allows, so that the level alone decides."""
    template = config.pod_template_create(actor=None, cluster=org.cluster, name="pod", body=RESTRICTED_POD)
    platform = config.platform_create(actor=None, pool=org.a100, name="gpu", override_templates=[template.name])
    return template, platform


def _preview(org, users, template, platform, level: str, pod: dict):
    config.pod_template_update(actor=None, template=template, body=pod)
    privileged = level == "privileged"
    config.platform_update(actor=None, platform=platform, pod_security_level=level, privileged_allowed=privileged,
                           host_network_allowed=privileged, allowed_mounts=["/etc"] if privileged else [])
    request = submission.Request(project=org.rnd_a, pools=[org.a100], image="busybox", name="case")
    return submission.workload_preview(actor=users["researcher"], request=request)


@pytest.mark.parametrize("level,control,spoil,path", CASES + MORE_CASES,
                         ids=[f"{c} {p.rsplit('.', 2)[-2]}.{p.rsplit('.', 1)[-1]}" for _, c, _, p in CASES + MORE_CASES])
def test_each_control_is_enforced_at_its_level_and_not_below(org, users, pss, level, control, spoil, path):
    template, platform = pss
    pod = copy.deepcopy(RESTRICTED_POD)
    spoil(pod)
    # The untouched pod meets every level.
    for each in podsecurity.LEVELS:
        assert _preview(org, users, template, platform, each, RESTRICTED_POD).job
    # Refused at its level and at every stricter one, naming the step, the control and the field.
    for each in podsecurity.LEVELS[podsecurity.LEVELS.index(level):]:
        with pytest.raises(submission.SubmissionRefused) as refused:
            _preview(org, users, template, platform, each, pod)
        assert refused.value.step == "pod security"
        assert path in refused.value.errors, refused.value.errors
        assert any(message.startswith(f"{control}: {path} ") and f"the {each} level of platform gpu of pool a100"
                   in message for message in refused.value.errors[path]), refused.value.errors[path]
    # Taken at the level below.
    preview = _preview(org, users, template, platform, LEVEL_BELOW[level], pod)
    assert preview.job["spec"]["template"]["spec"]["containers"][0]["image"] == "busybox"


def test_the_strictest_level_of_the_pools_tried_applies(org, users, pss):
    """A Job may land in any pool of its list: its pod must meet the level of each."""
    from workloads.models import PoolWorkloadSettings

    template, platform = pss
    config.platform_update(actor=None, platform=platform, pod_security_level="baseline")
    PoolWorkloadSettings.objects.update_or_create(pool=org.default, defaults={"pod_security_level": "restricted"})
    config.pod_template_update(actor=None, template=template, body={"spec": {"containers": [{"name": "main"}]}})
    request = submission.Request(project=org.rnd_a, pools=[org.a100, org.default], image="busybox", name="two")
    with pytest.raises(submission.SubmissionRefused) as refused:
        submission.workload_preview(actor=users["researcher"], request=request)
    assert refused.value.step == "pod security"
    assert "(Pod Security Standards, the restricted level of pool default)" in refused.value.text
    request.pools = [org.a100]
    assert submission.workload_preview(actor=users["researcher"], request=request).job


@pytest.mark.parametrize("field,value", [("nodeName", "a100-2"), ("NodeName", "v100-1"), ("schedulerName", "my-scheduler"),
                                         ("priority", 1000000)])
def test_a_template_never_names_a_node_a_scheduler_or_a_priority(org, users, pss, field, value):
    """Refused, not stripped: said when the template is saved, and at the templates step of a submission for a
    template stored before the rule (it names the template)."""
    from django.core.exceptions import ValidationError

    from workloads.models import PodTemplate

    template, _ = pss
    with pytest.raises(ValidationError) as refused:
        config.pod_template_update(actor=None, template=template, body={"spec": {field: value}})
    assert f"spec.{field}:" in str(refused.value) and "templates may not set it" in str(refused.value)
    PodTemplate.objects.filter(pk=template.pk).update(body={"spec": {field: value}})
    request = submission.Request(project=org.rnd_a, pools=[org.a100], image="busybox", name="pinned")
    with pytest.raises(submission.SubmissionRefused) as refused:
        submission.workload_preview(actor=users["researcher"], request=request)
    assert refused.value.step == "templates"
    assert refused.value.text.startswith(f"Pod template pod is malformed: spec.{field}:")


def test_the_console_sets_the_kai_scheduler_itself(org, users, pss):
    from enforcers.models import Enforcement

    Enforcement.objects.create(cluster=org.cluster, enforcer="kai")
    request = submission.Request(project=org.rnd_a, pools=[org.a100], image="busybox", name="kai")
    pod = submission.workload_preview(actor=users["researcher"], request=request).job["spec"]["template"]["spec"]
    assert pod["schedulerName"] == "kai-scheduler" and "nodeName" not in pod


def test_platform_flags_need_the_privileged_level(org):
    from django.core.exceptions import ValidationError

    for flag, value in (("privileged_allowed", True), ("host_network_allowed", True), ("allowed_mounts", ["/data"])):
        with pytest.raises(ValidationError) as refused:
            config.platform_create(actor=None, pool=org.a100, name="flagged", **{flag: value})
        assert refused.value.message_dict[flag] == [next(m for m in refused.value.messages if "level is baseline" in m)]
    platform = config.platform_create(actor=None, pool=org.a100, name="flagged", pod_security_level="privileged",
                                      privileged_allowed=True, host_network_allowed=True, allowed_mounts=["/data"])
    assert Platform.objects.get(pk=platform.pk).pod_security_level == "privileged"


def test_a_new_platform_starts_at_its_pools_level(org):
    config.pool_settings_update(actor=None, pool=org.a100, pod_security_level="restricted")
    assert config.platform_create(actor=None, pool=org.a100, name="hardened").pod_security_level == "restricted"


def test_the_api_refuses_naming_the_step_the_control_and_the_path(org, users, pss, api):
    template, platform = pss
    pod = copy.deepcopy(RESTRICTED_POD)
    _context(pod).update(capabilities={"drop": ["ALL"], "add": ["SYS_ADMIN"]}, allowPrivilegeEscalation=True,
                         runAsUser=0)
    pod["spec"]["containers"][0]["ports"] = [{"containerPort": 80, "hostPort": 80}]
    config.pod_template_update(actor=None, template=template, body=pod)
    config.platform_update(actor=None, platform=platform, pod_security_level="restricted")
    response = api(users["researcher"]).post("/api/v1/workloads/", {
        "project": org.rnd_a.pk, "pools": ["a100"], "image": "busybox", "dry_run": True}, format="json")
    assert response.status_code == 400
    body = response.json()
    assert body["step"] == "pod security"
    add = f"{T}.containers[0].securityContext.capabilities.add"
    assert body["detail"].startswith(f"Refused at the pod security step: Capabilities: {add} adds SYS_ADMIN")
    assert set(body["errors"]) == {add, f"{T}.containers[0].ports[0].hostPort",
                                   f"{T}.containers[0].securityContext.allowPrivilegeEscalation",
                                   f"{T}.containers[0].securityContext.runAsUser"}
    assert [m.split(":")[0] for m in body["errors"][add]] == ["Capabilities", "Capabilities"]  # baseline and restricted
    # The platform's page says it before anyone submits.
    from django.test import Client

    client = Client()
    client.force_login(users["sysadmin"])
    page = client.get(f"/platforms/{platform.pk}/").content.decode()
    assert "ask more than the restricted level allows" in page and "Host Ports" in page
