"""The Kubernetes Pod Security Standards, checked on the pod a submission renders (no Django import).

Source: the Kubernetes page "Pod Security Standards"
(https://kubernetes.io/docs/concepts/security/pod-security-standards/), whose controls the pod security
admission controller enforces (kubernetes/kubernetes, staging/src/k8s.io/pod-security-admission/policy/
check_*.go, read for the exact allowed values). Three levels, cumulative:

- `privileged`: no restriction.
- `baseline` ("prevents known privilege escalations"), every control below checked on the pod and on
  every container — `initContainers`, `containers` and `ephemeralContainers`:
    HostProcess                spec.securityContext.windowsOptions.hostProcess, containers[*]…: undefined / false
    Host Namespaces            spec.hostNetwork, spec.hostPID, spec.hostIPC: undefined / false
    Privileged Containers      containers[*].securityContext.privileged: undefined / false
    Capabilities               containers[*].securityContext.capabilities.add: only AUDIT_WRITE, CHOWN,
                               DAC_OVERRIDE, FOWNER, FSETID, KILL, MKNOD, NET_BIND_SERVICE, SETFCAP, SETGID,
                               SETPCAP, SETUID, SYS_CHROOT
    HostPath Volumes           spec.volumes[*].hostPath: undefined
    Host Ports                 containers[*].ports[*].hostPort: undefined / 0
    Host Probes / Lifecycle Hooks (v1.34+)  containers[*].{liveness,readiness,startup}Probe.{httpGet,tcpSocket}.host,
                               containers[*].lifecycle.{postStart,preStop}.{httpGet,tcpSocket}.host: undefined / ""
    AppArmor                   spec.securityContext.appArmorProfile.type, containers[*]…: undefined, RuntimeDefault,
                               Localhost; metadata.annotations["container.apparmor.security.beta.kubernetes.io/*"]:
                               undefined, "", runtime/default, localhost/*
    SELinux                    seLinuxOptions.type (pod, containers): undefined, "", container_t, container_init_t,
                               container_kvm_t, container_engine_t; seLinuxOptions.user and .role: undefined / ""
    /proc Mount Type           containers[*].securityContext.procMount: undefined / Default
    Seccomp                    seccompProfile.type (pod, containers): undefined, RuntimeDefault, Localhost
    Sysctls                    spec.securityContext.sysctls[*].name: the safe set (SAFE_SYSCTLS)
- `restricted` ("current pod hardening best practices"): baseline, and
    Volume Types               spec.volumes[*]: only configMap, csi, downwardAPI, emptyDir, ephemeral, image,
                               persistentVolumeClaim, projected, secret
    Privilege Escalation       containers[*].securityContext.allowPrivilegeEscalation: false
    Running as Non-root        spec.securityContext.runAsNonRoot true, or true on every container (none false)
    Running as Non-root user   runAsUser (pod, containers): undefined or not 0
    Seccomp                    seccompProfile.type RuntimeDefault or Localhost on the pod, or on every container
    Capabilities               containers[*].securityContext.capabilities.drop includes ALL; .add only
                               NET_BIND_SERVICE

Stricter than the admission controller on purpose: the relaxations it makes for Windows pods
(`spec.os.name: windows`) and for pods in a user namespace (`hostUsers: false`) are not made.

`check_job(job, level)` checks a `batch/v1` Job's pod template (after every template is merged: the
pod the cluster would create) and returns one `Violation` per offending field, each naming its
control, level and path (`spec.template.spec.containers[0].securityContext.capabilities.add`).

`scheduling_bypass(spec)` names the fields the console never takes from a template or a user: the
pod's node (`nodeName`, in any letter case), its scheduler (`schedulerName`: the console sets
`kai-scheduler` itself) and an integer `priority` (set from the PriorityClass): each would place or
rank the pod past the pools' affinity, the scheduler and the quota.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Iterator, Mapping

PRIVILEGED, BASELINE, RESTRICTED = "privileged", "baseline", "restricted"
LEVELS = (PRIVILEGED, BASELINE, RESTRICTED)
_RANK = {level: index for index, level in enumerate(LEVELS)}

BASELINE_CAPABILITIES = frozenset({
    "AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD", "NET_BIND_SERVICE", "SETFCAP",
    "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT",
})
SAFE_SYSCTLS = frozenset({
    "kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
})
SELINUX_TYPES = frozenset({"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"})
PROFILE_TYPES = frozenset({"RuntimeDefault", "Localhost"})
RESTRICTED_VOLUMES = frozenset({"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "image",
                                "persistentVolumeClaim", "projected", "secret"})
APPARMOR_ANNOTATION = "container.apparmor.security.beta.kubernetes.io/"
CONTAINER_LISTS = ("initContainers", "containers", "ephemeralContainers")

# The controls, as the page names them, in its order (baseline, then restricted).
CONTROLS: tuple[tuple[str, str], ...] = (
    (BASELINE, "HostProcess"), (BASELINE, "Host Namespaces"), (BASELINE, "Privileged Containers"),
    (BASELINE, "Capabilities"), (BASELINE, "HostPath Volumes"), (BASELINE, "Host Ports"),
    (BASELINE, "Host Probes / Lifecycle Hooks"), (BASELINE, "AppArmor"), (BASELINE, "SELinux"),
    (BASELINE, "/proc Mount Type"), (BASELINE, "Seccomp"), (BASELINE, "Sysctls"),
    (RESTRICTED, "Volume Types"), (RESTRICTED, "Privilege Escalation"), (RESTRICTED, "Running as Non-root"),
    (RESTRICTED, "Running as Non-root user"), (RESTRICTED, "Seccomp"), (RESTRICTED, "Capabilities"),
)


@dataclass(frozen=True)
class Violation:
    level: str     # the level whose control this is (baseline or restricted)
    control: str   # the control's name on the Pod Security Standards page
    path: str      # the field, e.g. spec.template.spec.containers[0].securityContext.privileged
    message: str   # what is set and what the level allows

    def __str__(self) -> str:
        return f"{self.control} ({self.level}): {self.path} {self.message}"


def stricter(a: str, b: str) -> str:
    return a if _RANK.get(a, 1) >= _RANK.get(b, 1) else b


def allows(level: str, required: str) -> bool:
    """Whether a pod that needs `required` may run where `level` is the most allowed."""
    return _RANK[required] <= _RANK[level]


def _show(value: Any) -> str:
    """A value as it is written in the pod's JSON (true, 0, "Unconfined")."""
    return json.dumps(value, ensure_ascii=False, default=str)


def _dict(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else {}


def _containers(spec: Mapping[str, Any], prefix: str) -> Iterator[tuple[Mapping[str, Any], str]]:
    for list_name in CONTAINER_LISTS:
        items = spec.get(list_name)
        if isinstance(items, list):
            for index, container in enumerate(items):
                if isinstance(container, dict):
                    yield container, f"{prefix}.{list_name}[{index}]"


def _names(value: Any) -> list[str]:
    return [str(item) for item in value] if isinstance(value, list) else []


def _baseline(spec: Mapping[str, Any], metadata: Mapping[str, Any], prefix: str, meta_prefix: str) -> list[Violation]:
    found: list[Violation] = []

    def add(control: str, path: str, message: str) -> None:
        found.append(Violation(BASELINE, control, path, message))

    pod_context = _dict(spec.get("securityContext"))
    containers = list(_containers(spec, prefix))

    # HostProcess
    if _dict(pod_context.get("windowsOptions")).get("hostProcess") is True:
        add("HostProcess", f"{prefix}.securityContext.windowsOptions.hostProcess",
            "is true: HostProcess containers get privileged access to the Windows node; allowed: undefined or false")
    for container, where in containers:
        if _dict(_dict(container.get("securityContext")).get("windowsOptions")).get("hostProcess") is True:
            add("HostProcess", f"{where}.securityContext.windowsOptions.hostProcess",
                "is true: HostProcess containers get privileged access to the Windows node; allowed: undefined or false")
    # Host Namespaces
    for name in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(name) is True:
            add("Host Namespaces", f"{prefix}.{name}", "is true: sharing the host's namespaces is not allowed; "
                                                      "allowed: undefined or false")
    for container, where in containers:
        context = _dict(container.get("securityContext"))
        # Privileged Containers
        if context.get("privileged") is True:
            add("Privileged Containers", f"{where}.securityContext.privileged",
                "is true: privileged containers disable most security mechanisms; allowed: undefined or false")
        # Capabilities
        added = [cap for cap in _names(_dict(context.get("capabilities")).get("add")) if cap not in BASELINE_CAPABILITIES]
        if added:
            add("Capabilities", f"{where}.securityContext.capabilities.add",
                f"adds {', '.join(added)}: the baseline level allows only the default set "
                f"({', '.join(sorted(BASELINE_CAPABILITIES))})")
        # Host Ports
        ports = container.get("ports")
        for index, port in enumerate(ports if isinstance(ports, list) else []):
            host_port = _dict(port).get("hostPort")
            if host_port not in (None, 0):
                add("Host Ports", f"{where}.ports[{index}].hostPort",
                    f"is {_show(host_port)}: a container may not take a port of the node; allowed: undefined or 0")
        # Host Probes / Lifecycle Hooks
        for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
            for handler in ("httpGet", "tcpSocket"):
                host = _dict(_dict(container.get(probe)).get(handler)).get("host")
                if host not in (None, ""):
                    add("Host Probes / Lifecycle Hooks", f"{where}.{probe}.{handler}.host",
                        f"is {_show(host)}: probes may not name another host; allowed: undefined or \"\"")
        for hook in ("postStart", "preStop"):
            for handler in ("httpGet", "tcpSocket"):
                host = _dict(_dict(_dict(container.get("lifecycle")).get(hook)).get(handler)).get("host")
                if host not in (None, ""):
                    add("Host Probes / Lifecycle Hooks", f"{where}.lifecycle.{hook}.{handler}.host",
                        f"is {_show(host)}: lifecycle hooks may not name another host; allowed: undefined or \"\"")
        # /proc Mount Type
        proc_mount = context.get("procMount")
        if proc_mount not in (None, "Default"):
            add("/proc Mount Type", f"{where}.securityContext.procMount",
                f"is {_show(proc_mount)}: the default /proc masks are required; allowed: undefined or Default")
    # HostPath Volumes
    volumes = spec.get("volumes")
    for index, volume in enumerate(volumes if isinstance(volumes, list) else []):
        if _dict(volume).get("hostPath") is not None:
            add("HostPath Volumes", f"{prefix}.volumes[{index}].hostPath",
                "is set: volumes from the node's file system are not allowed; allowed: undefined")
    # The security contexts of the pod and of every container, with their paths.
    contexts = [(pod_context, f"{prefix}.securityContext")] + [
        (_dict(c.get("securityContext")), f"{w}.securityContext") for c, w in containers]
    # AppArmor and Seccomp: a profile's type, if set, is RuntimeDefault or Localhost
    for control, key in (("AppArmor", "appArmorProfile"), ("Seccomp", "seccompProfile")):
        for owner, where in contexts:
            profile = owner.get(key)
            if profile is not None and _dict(profile).get("type") not in PROFILE_TYPES:
                add(control, f"{where}.{key}.type",
                    f"is {_show(_dict(profile).get('type'))}: allowed: undefined, RuntimeDefault or Localhost")
    annotations = _dict(metadata.get("annotations"))
    for key, value in annotations.items():
        if str(key).startswith(APPARMOR_ANNOTATION):
            text = str(value)
            if not (text in ("", "runtime/default") or text.startswith("localhost/")):
                add("AppArmor", f"{meta_prefix}.annotations[{key}]",
                    f"is {_show(text)}: allowed: undefined, \"\", runtime/default or localhost/*")
    # SELinux
    for owner, where in contexts:
        options = _dict(owner.get("seLinuxOptions"))
        if options.get("type") not in (None, *SELINUX_TYPES):
            add("SELinux", f"{where}.seLinuxOptions.type",
                f"is {_show(options.get('type'))}: allowed: undefined, \"\", {', '.join(sorted(SELINUX_TYPES - {''}))}")
        for part in ("user", "role"):
            if options.get(part) not in (None, ""):
                add("SELinux", f"{where}.seLinuxOptions.{part}",
                    f"is {_show(options.get(part))}: a custom SELinux {part} is not allowed; allowed: undefined or \"\"")
    # Sysctls
    sysctls = pod_context.get("sysctls")
    for index, sysctl in enumerate(sysctls if isinstance(sysctls, list) else []):
        name = _dict(sysctl).get("name")
        if name not in SAFE_SYSCTLS:
            add("Sysctls", f"{prefix}.securityContext.sysctls[{index}].name",
                f"is {_show(name)}: only the safe sysctls are allowed ({', '.join(sorted(SAFE_SYSCTLS))})")
    return found


def _restricted(spec: Mapping[str, Any], prefix: str) -> list[Violation]:
    found: list[Violation] = []

    def add(control: str, path: str, message: str) -> None:
        found.append(Violation(RESTRICTED, control, path, message))

    pod_context = _dict(spec.get("securityContext"))
    containers = list(_containers(spec, prefix))
    # Volume Types
    volumes = spec.get("volumes")
    for index, volume in enumerate(volumes if isinstance(volumes, list) else []):
        sources = [key for key in _dict(volume) if key != "name"]
        for source in sources:
            if source not in RESTRICTED_VOLUMES:
                add("Volume Types", f"{prefix}.volumes[{index}].{source}",
                    f"is a {source} volume: allowed volume types: {', '.join(sorted(RESTRICTED_VOLUMES))}")
    pod_non_root = pod_context.get("runAsNonRoot")
    if pod_non_root is False:
        add("Running as Non-root", f"{prefix}.securityContext.runAsNonRoot", "is false: containers must run as non-root; "
                                                                               "allowed: true")
    if pod_context.get("runAsUser") == 0:
        add("Running as Non-root user", f"{prefix}.securityContext.runAsUser", "is 0 (root): allowed: undefined or "
                                                                                "a non-zero user")
    pod_seccomp = _dict(pod_context.get("seccompProfile")).get("type") in PROFILE_TYPES
    for container, where in containers:
        context = _dict(container.get("securityContext"))
        # Privilege Escalation
        escalation = context.get("allowPrivilegeEscalation")
        if escalation is not False:
            said = f"is {_show(escalation)}" if "allowPrivilegeEscalation" in context else "is undefined"
            add("Privilege Escalation", f"{where}.securityContext.allowPrivilegeEscalation",
                f"{said}: it must be false (no privilege escalation through set-user-ID programs)")
        # Running as Non-root
        non_root = context.get("runAsNonRoot")
        if non_root is False:
            add("Running as Non-root", f"{where}.securityContext.runAsNonRoot", "is false: allowed: true (or undefined "
                                                                                "with the pod's runAsNonRoot true)")
        elif non_root is None and pod_non_root is not True:
            add("Running as Non-root", f"{where}.securityContext.runAsNonRoot",
                f"is undefined and so is {prefix}.securityContext.runAsNonRoot: one of them must be true")
        # Running as Non-root user
        if context.get("runAsUser") == 0:
            add("Running as Non-root user", f"{where}.securityContext.runAsUser", "is 0 (root): allowed: undefined "
                                                                                  "or a non-zero user")
        # Seccomp
        profile = context.get("seccompProfile")
        if profile is None and not pod_seccomp:
            add("Seccomp", f"{where}.securityContext.seccompProfile.type",
                f"is undefined and so is {prefix}.securityContext.seccompProfile.type: one of them must be "
                "RuntimeDefault or Localhost")
        # Capabilities
        capabilities = _dict(context.get("capabilities"))
        if "ALL" not in _names(capabilities.get("drop")):
            add("Capabilities", f"{where}.securityContext.capabilities.drop",
                "does not include ALL: the restricted level drops every capability")
        added = [cap for cap in _names(capabilities.get("add")) if cap != "NET_BIND_SERVICE"]
        if added:
            add("Capabilities", f"{where}.securityContext.capabilities.add",
                f"adds {', '.join(added)}: the restricted level allows adding only NET_BIND_SERVICE")
    return found


def check_pod(spec: Mapping[str, Any], metadata: Mapping[str, Any] | None = None, *, level: str,
              prefix: str = "spec", meta_prefix: str = "metadata") -> list[Violation]:
    """Every field of a pod (spec and metadata) the level does not allow, in the page's order of controls."""
    if level not in LEVELS:
        raise ValueError(f"unknown pod security level {_show(level)}: one of {', '.join(LEVELS)}")
    if level == PRIVILEGED:
        return []
    spec, metadata = _dict(spec), _dict(metadata)
    found = _baseline(spec, metadata, prefix, meta_prefix)
    if level == RESTRICTED:
        found += _restricted(spec, prefix)
    order = {control: index for index, control in enumerate(CONTROLS)}
    return sorted(found, key=lambda v: order.get((v.level, v.control), len(order)))


def check_job(job: Mapping[str, Any], *, level: str) -> list[Violation]:
    """The Job's pod template against the level (paths from the Job: spec.template.spec…)."""
    template = _dict(_dict(job.get("spec")).get("template"))
    return check_pod(_dict(template.get("spec")), _dict(template.get("metadata")), level=level,
                     prefix="spec.template.spec", meta_prefix="spec.template.metadata")

# Fields the console sets (or leaves to the scheduler) and never takes from a template or a user.
SCHEDULING_FIELDS = {
    "nodename": "names the node to run on, bypassing the scheduler, the pools' node affinity and the quota",
    "schedulername": "chooses the scheduler; the console sets it (kai-scheduler with KAI Scheduler)",
    "priority": "sets the pod's priority directly; the console sets priorityClassName and the cluster the priority",
}


def scheduling_bypass(spec: Mapping[str, Any], prefix: str = "spec") -> list[str]:
    """Sentences naming each field of a pod spec that would place or rank the pod past the console's
    pools, scheduler and priority classes (keys compared in any letter case)."""
    problems = []
    for key in _dict(spec):
        reason = SCHEDULING_FIELDS.get(str(key).lower())
        if reason is not None:
            problems.append(f"{prefix}.{key}: {reason}; templates may not set it.")
    return problems
