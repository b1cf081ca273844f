"""The controller loop: every controller of the emulator once, in a fixed order, on the one clock.

:meth:`ControllersMixin.tick` runs, in this order:

1. the Job controller (:mod:`kubesim.jobs`): pods for Jobs, their status and conditions;
2. the schedulers, each a callable in :attr:`ControllersMixin.scheduler_steps` (register one with
   :meth:`ControllersMixin.register_scheduler`; it is called with the emulator and binds pods to nodes,
   e.g. by setting ``spec.nodeName``; it may return a list of what it did);
3. the kubelets (:mod:`kubesim.kubelet`): bound pods start, run their time, end; deleted pods stop;
4. Karpenter's stand-in (:mod:`kubesim.karpenter`): nodes for pods no node fits;
5. NVIDIA's MIG manager (:mod:`kubesim.mig_manager`): a node's new ``nvidia.com/mig.config`` layout;
6. the queue status KAI Scheduler and Kueue report (:mod:`kubesim.schedulers`).

``KubeEmulator(controllers=True)`` turns them on: the emulator then notes, on every write, which Jobs and
pods have something to do (so that a tick with nothing to do costs next to nothing, whatever the number of
pods), deletes pods bound to nodes gracefully (a kubelet stops them), and, on a real clock, ticks in a
background thread every ``controller_interval`` seconds (default 1) once started.  With a
:class:`kubesim.clock.ManualClock` nothing ticks by itself: a test moves the clock and calls :meth:`tick`
(also ``POST /_emulator/tick``).  ``tick()`` works without ``controllers=True`` too: the first one looks at
every object once.
"""

from __future__ import annotations

import threading
import traceback
from collections.abc import Callable, Iterable
from typing import Any

from kubesim.errors import ApiError
from kubesim.jobs import JOBS
from kubesim.kubelet import RUN_SECONDS_ANNOTATION
from kubesim.resources import PODS
from kubesim.util import Key, Obj

SchedulerStep = Callable[[Any], Iterable[str] | str | int | None]


class ControllersMixin:
    """Part of :class:`kubesim.KubeEmulator`: the controller loop and its thread."""

    def _init_controllers(self, enabled: bool, interval: float | None) -> None:
        self.controllers = enabled
        #: Seconds between ticks of the background thread (real clock only); None: 1 s.
        self.controller_interval = 1.0 if interval is None else float(interval)
        #: The schedulers' slot of the loop: callables taking the emulator, called in order at every tick.
        self.scheduler_steps: list[SchedulerStep] = []
        self._tracking = False
        self._tick_lock = threading.Lock()
        self._ctl_thread: threading.Thread | None = None
        self._ctl_stop = threading.Event()
        self._event_serial = 0
        self._init_jobs()
        self._init_kubelet()
        if enabled:
            self._start_tracking(scan=False)

    def register_scheduler(self, step: SchedulerStep) -> SchedulerStep:
        """Add a scheduler's step to the loop (after the Job controller, before the kubelets); returns it,
        so that it can serve as a decorator."""
        self.scheduler_steps.append(step)
        return step

    def _start_tracking(self, *, scan: bool) -> None:
        """From now on every write of a pod or a Job notes what the controllers must look at."""
        with self._lock:
            if self._tracking:
                return
            self._tracking = True
            self._hooks.setdefault(JOBS, []).append(self._job_hook)
            self._hooks.setdefault(PODS, []).append(self._pod_hook)
            if scan:
                self._job_scan()
                self._kubelet_scan()

    def _pod_hook(self, key: Key, obj: Obj | None, gone_owners: tuple[str, ...] = ()) -> None:
        """A pod was written (or deleted): note it for the Job controller and the kubelet when it concerns
        them. On every pod write, bulk loads included: a few dictionary lookups, nothing more."""
        if obj is None:
            self._job_pod_hook(key, None, gone_owners)
            self._kubelet_hook(key, None)
            return
        md = obj["metadata"]
        if "ownerReferences" in md or "finalizers" in md:
            self._job_pod_hook(key, obj)
        if "deletionTimestamp" in md:
            self._kubelet_dirty.add(key)
            return
        status = obj.get("status")
        phase = status.get("phase") if status else None
        if phase == "Running":
            annotations = md.get("annotations")
            if annotations and RUN_SECONDS_ANNOTATION in annotations:
                self._kubelet_dirty.add(key)
        elif phase is None or phase == "Pending":
            spec = obj.get("spec")
            if spec and spec.get("nodeName"):
                self._kubelet_dirty.add(key)

    # ------------------------------------------------------------------ the loop

    def tick(self) -> list[str]:
        """Run every controller once (Job controller, schedulers, kubelets, Karpenter, queue status);
        returns what happened."""
        with self._tick_lock:
            self._start_tracking(scan=True)
            done = self.job_controller_step()
            for step in list(self.scheduler_steps):
                result = step(self)
                if isinstance(result, str):
                    done.append(result)
                elif isinstance(result, Iterable):
                    done += [str(r) for r in result]
            done += self.kubelet_step()
            done += self.karpenter_step()
            done += self.mig_manager_step()
            done += self.device_plugin_step()
            changed = self.report_queue_status()
            if changed:
                done.append(f"queue status: {changed} updated")
            return done

    @property
    def controllers_running(self) -> bool:
        """Whether the background thread ticks."""
        return self._ctl_thread is not None and self._ctl_thread.is_alive()

    def start_controllers(self, interval: float | None = None) -> None:
        """Tick every ``interval`` seconds (default :attr:`controller_interval`) in a background thread."""
        self.stop_controllers()
        self.controllers = True
        self._start_tracking(scan=True)
        every = self.controller_interval if interval is None else float(interval)
        stop = self._ctl_stop = threading.Event()

        def run() -> None:
            while not stop.wait(every):
                try:
                    self.tick()
                except ApiError:
                    pass  # an object vanished meanwhile (a client's delete): the next tick sees it
                except Exception:  # a bug must not end the loop silently: say it, go on
                    traceback.print_exc()

        self._ctl_thread = threading.Thread(target=run, name="kube-emulator-controllers", daemon=True)
        self._ctl_thread.start()

    def stop_controllers(self) -> None:
        """Stop the background thread if running."""
        self._ctl_stop.set()
        thread, self._ctl_thread = self._ctl_thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5)

    # ------------------------------------------------------------------ the manual clock, over HTTP too

    def _manual_clock(self) -> Any:
        if not self.clock.manual:
            raise ApiError(400, "the emulator runs on the real clock: only a ManualClock is moved by hand",
                           "BadRequest")
        return self.clock

    def advance_clock(self, seconds: float) -> str:
        """Move a manual clock forward by ``seconds``; returns the new time (RFC 3339)."""
        try:
            return self.clock.rfc3339(self._manual_clock().advance(float(seconds)))
        except ValueError as exc:
            raise ApiError(400, str(exc), "BadRequest") from exc

    def set_clock(self, time: float | str) -> str:
        """Set a manual clock to ``time`` (seconds since the epoch, or RFC 3339); returns it (RFC 3339)."""
        try:
            return self.clock.rfc3339(self._manual_clock().set(time))
        except ValueError as exc:
            raise ApiError(400, str(exc), "BadRequest") from exc

    # ------------------------------------------------------------------ shared by the controllers

    def _record_event(self, obj: Obj, type_: str, reason: str, message: str, component: str = "job-controller",
                      kind: str = "Job", api_version: str = "batch/v1") -> None:
        """A core/v1 Event about ``obj`` as its controller records it (lock held)."""
        md = obj["metadata"]
        now = self.clock.now()
        self._event_serial += 1
        stamp = self.clock.rfc3339(now)
        event = {
            "metadata": {"name": f"{md['name']}.{int(now * 1e9) + self._event_serial:x}",
                         "namespace": md.get("namespace") or "default"},
            "involvedObject": {"kind": kind, "apiVersion": api_version, "name": md["name"],
                               "namespace": md.get("namespace") or "default", "uid": md.get("uid", ""),
                               "resourceVersion": md.get("resourceVersion", "")},
            "reason": reason, "message": message, "type": type_, "count": 1,
            "source": {"component": component}, "firstTimestamp": stamp, "lastTimestamp": stamp,
            "eventTime": None, "reportingComponent": component, "reportingInstance": "",
        }
        self._put("events", event, upsert=True)
