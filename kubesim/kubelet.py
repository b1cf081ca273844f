"""A kubelet for every node: bound pods start, run for the time they are given, and end.

Following the pod lifecycle of the Kubernetes documentation (https://kubernetes.io/docs/concepts/workloads/
pods/pod-lifecycle/: phases, container states, restart policy, termination of pods), one
:meth:`KubeletMixin.kubelet_step` at a time, on the emulator's clock:

- a pod bound to a node that exists (``spec.nodeName`` set by a scheduler) and still ``Pending`` starts:
  phase ``Running``, ``status.startTime``, every container ``running`` (``startedAt``), conditions
  ``Initialized``, ``Ready``, ``ContainersReady``, ``PodScheduled`` True, host and pod IPs; an unbound pod
  stays Pending;
- a running pod whose annotation ``emulator.gpu-capacity.io/run-seconds`` (set on a Job's pod template,
  say) is over ends with the exit code of ``emulator.gpu-capacity.io/exit-code`` (default 0): with
  ``restartPolicy`` Never it turns ``Succeeded`` (0) or ``Failed`` (non-zero, reason ``Error``), its
  containers ``terminated`` with that code; with ``OnFailure`` a failure (and with ``Always`` any end)
  restarts the containers at once (``restartCount`` + 1; upstream's CrashLoopBackOff delay is not
  emulated) for another run.  A pod without the annotation runs until it is deleted;
- a pod being deleted gracefully (``deletionTimestamp``, see :mod:`kubesim.gc`) is stopped at the next
  step: containers terminated with exit code 143 (SIGTERM), phase ``Failed`` unless it had ended, and then
  removed (or left to its finalizers).

Only pods that changed, and running pods whose time is up (a heap of due times), are looked at: a step
with nothing to do costs next to nothing, whatever the number of pods.
"""

from __future__ import annotations

import heapq
from typing import Any

import orjson

from kubesim.clock import parse_rfc3339
from kubesim.errors import ApiError
from kubesim.factories import _pod_status
from kubesim.resources import NODES, PODS, get_resource
from kubesim.util import Key, Obj

RUN_SECONDS_ANNOTATION = "emulator.gpu-capacity.io/run-seconds"
EXIT_CODE_ANNOTATION = "emulator.gpu-capacity.io/exit-code"
SIGTERM_EXIT_CODE = 143


def run_seconds(pod: Obj) -> float | None:
    """How long the pod's containers run once started (its run-seconds annotation), or None: forever."""
    text = (pod["metadata"].get("annotations") or {}).get(RUN_SECONDS_ANNOTATION)
    try:
        value = float(text) if text is not None else None
    except ValueError:
        return None
    return value if value is not None and value >= 0 else None


def exit_code(pod: Obj) -> int:
    text = (pod["metadata"].get("annotations") or {}).get(EXIT_CODE_ANNOTATION)
    try:
        return int(text) if text is not None else 0
    except ValueError:
        return 1


def _started(pod: Obj) -> float | None:
    status = pod.get("status") or {}
    times = [parse_rfc3339(((s.get("state") or {}).get("running") or {}).get("startedAt"))
             for s in status.get("containerStatuses") or ()]
    times = [t for t in times if t is not None]
    return max(times) if times else parse_rfc3339(status.get("startTime"))


class KubeletMixin:
    """Part of :class:`kubesim.KubeEmulator`: the nodes' kubelets, stepwise."""

    def _init_kubelet(self) -> None:
        self._kubelet_dirty: set[Key] = set()
        self._kubelet_due: list[tuple[float, Key]] = []  # (when its run is over, pod)
        self._kubelet_due_at: dict[Key, float] = {}

    def _kubelet_hook(self, key: Key, obj: Obj | None, gone_owners: tuple[str, ...] = ()) -> None:
        if obj is None:
            self._kubelet_dirty.discard(key)
            self._kubelet_due_at.pop(key, None)
            return
        md, spec, status = obj["metadata"], obj.get("spec") or {}, obj.get("status") or {}
        phase = status.get("phase") or "Pending"
        if md.get("deletionTimestamp") or (spec.get("nodeName") and phase == "Pending") or (
                phase == "Running" and RUN_SECONDS_ANNOTATION in (md.get("annotations") or ())):
            self._kubelet_dirty.add(key)

    def _kubelet_scan(self) -> None:
        """The pods a kubelet has to look at, once, at the start of tracking (no JSON parsed for the rest)."""
        index = get_resource(PODS).field_index
        node_at, phase_at = index["spec.nodeName"], index["status.phase"]
        annotation = RUN_SECONDS_ANNOTATION.encode()
        for key, (data, _rv, _labels, fields) in self._stores[PODS].entries.items():
            if (fields[node_at] and fields[phase_at] in ("", "Pending")) or annotation in data \
                    or b'"deletionTimestamp"' in data:
                self._kubelet_hook(key, orjson.loads(data))

    def kubelet_step(self) -> list[str]:
        """Start, end, restart and stop pods as their kubelets would now; returns what happened."""
        done: list[str] = []
        with self._lock:
            now = self.clock.now()
            keys = self._kubelet_dirty
            self._kubelet_dirty = set()
            while self._kubelet_due and self._kubelet_due[0][0] <= now:
                when, key = heapq.heappop(self._kubelet_due)
                if self._kubelet_due_at.get(key) == when:
                    del self._kubelet_due_at[key]
                    keys.add(key)
            for key in sorted(keys):
                entry = self._stores[PODS].entries.get(key)
                if entry is None:
                    continue
                try:
                    message = self._kubelet_pod(key, orjson.loads(entry[0]), now)
                except ApiError:
                    continue  # changed under us (a client's write): the hook brings it back
                if message:
                    done.append(message)
        return done

    def _kubelet_due_push(self, key: Key, when: float) -> None:
        if self._kubelet_due_at.get(key) == when:
            return
        self._kubelet_due_at[key] = when
        heapq.heappush(self._kubelet_due, (when, key))

    def _kubelet_pod(self, key: Key, pod: Obj, now: float) -> str | None:
        md, spec = pod["metadata"], pod.get("spec") or {}
        status = pod.get("status") or {}
        phase = status.get("phase") or "Pending"
        stamp = self.clock.rfc3339(now)
        node = spec.get("nodeName")
        if md.get("deletionTimestamp"):
            if not md.get("deletionGracePeriodSeconds"):
                return None  # not the kubelet's: it waits for its finalizers
            if phase not in ("Succeeded", "Failed"):
                self._kubelet_set_status(key, pod, "Failed", stamp, code=SIGTERM_EXIT_CODE)
            self._finish_graceful(PODS, key)
            return f"pod {key[0]}/{key[1]} stopped on {node}"
        if not node or ("", node) not in self._stores[NODES].entries:
            return None
        if phase == "Pending":
            self._kubelet_set_status(key, pod, "Running", stamp)
            seconds = run_seconds(pod)
            if seconds is not None:  # from the start as written (whole seconds), as a later look reads it
                self._kubelet_due_push(key, (parse_rfc3339(stamp) or now) + seconds)
            return f"pod {key[0]}/{key[1]} running on {node}"
        if phase != "Running":
            return None
        seconds = run_seconds(pod)
        started = _started(pod)
        if seconds is None or started is None:
            return None
        if started + seconds > now:
            self._kubelet_due_push(key, started + seconds)
            return None
        code = exit_code(pod)
        policy = spec.get("restartPolicy") or "Always"
        if policy == "Always" or (policy == "OnFailure" and code != 0):
            self._kubelet_restart(key, pod, stamp, code)
            self._kubelet_due_push(key, (parse_rfc3339(stamp) or now) + seconds)
            return f"pod {key[0]}/{key[1]} restarted (exit code {code})"
        self._kubelet_set_status(key, pod, "Succeeded" if code == 0 else "Failed", stamp, code=code)
        return f"pod {key[0]}/{key[1]} {'Succeeded' if code == 0 else 'Failed'} (exit code {code})"

    def _kubelet_set_status(self, key: Key, pod: Obj, phase: str, stamp: str, *, code: int | None = None) -> None:
        old = pod.get("status") or {}
        start = old.get("startTime") or stamp
        spec = pod.get("spec") or {}
        status = _pod_status(key[0], key[1], spec, phase, phase == "Running", start, stamp)
        restarts = {s.get("name"): int(s.get("restartCount") or 0) for s in old.get("containerStatuses") or ()}
        started = _started(pod)
        for cs in status.get("containerStatuses") or ():
            cs["restartCount"] = restarts.get(cs.get("name"), 0)
            terminated = (cs.get("state") or {}).get("terminated")
            if terminated is not None and code is not None:
                terminated["exitCode"] = code
                terminated["reason"] = "Completed" if code == 0 else "Error"
                if started is not None:
                    terminated["startedAt"] = self.clock.rfc3339(started)
        if phase == "Running":
            for cs in status.get("containerStatuses") or ():
                cs["state"] = {"running": {"startedAt": stamp}}
        for cond in status.get("conditions") or ():
            previous = next((c for c in old.get("conditions") or () if c.get("type") == cond["type"]), None)
            if previous is not None and previous.get("status") == cond.get("status"):
                cond["lastTransitionTime"] = previous.get("lastTransitionTime", cond["lastTransitionTime"])
        # Conditions the kubelet does not own stay (a scheduler's DisruptionTarget on a pod it evicts: the
        # kubelet's status manager keeps them when it writes its own).
        owned = {c.get("type") for c in status.get("conditions") or ()}
        kept = [c for c in old.get("conditions") or () if isinstance(c, dict) and c.get("type") not in owned]
        if kept:
            status["conditions"] = [*(status.get("conditions") or []), *kept]

        def change(p: Obj) -> None:
            p["status"] = status

        self._update(PODS, key, change)

    def _kubelet_restart(self, key: Key, pod: Obj, stamp: str, code: int) -> None:
        def change(p: Obj) -> None:
            for cs in (p.get("status") or {}).get("containerStatuses") or ():
                running: Any = (cs.get("state") or {}).get("running") or {}
                cs["lastState"] = {"terminated": {"exitCode": code, "reason": "Completed" if code == 0 else "Error",
                                                  "startedAt": running.get("startedAt", stamp), "finishedAt": stamp,
                                                  "containerID": cs.get("containerID", "")}}
                cs["state"] = {"running": {"startedAt": stamp}}
                cs["restartCount"] = int(cs.get("restartCount") or 0) + 1

        self._update(PODS, key, change)
