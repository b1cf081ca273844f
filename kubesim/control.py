"""The control surface: ``POST /_emulator/<op>`` with JSON keyword arguments calls the emulator's method."""

from __future__ import annotations

import random
from typing import Any

from kubesim.errors import ApiError
from kubesim.factories import make_node, make_pod
from kubesim.util import Obj


class ControlMixin:
    """Part of :class:`kubesim.KubeEmulator`: which methods HTTP may call, and how arguments convert."""

    # ------------------------------------------------------------------ HTTP control surface

    _CONTROL_OPS = frozenset(
        {
            "add_node",
            "upsert_node",
            "update_node",
            "delete_node",
            "get_node",
            "add_pod",
            "upsert_pod",
            "update_pod",
            "delete_pod",
            "get_pod",
            "add_namespace",
            "load",
            "set_node_condition",
            "cordon",
            "set_node_labels",
            "set_pod_phase",
            "drop_watches",
            "fail_next",
            "set_offline",
            "compact",
            "set_history_size",
            "stats",
            "reset_stats",
            "start_chaos",
            "stop_chaos",
            "chaos_step",
            "report_queue_status",
            "kueue_step",
            "report_kai_status",
            "default_scheduler_step",
            "kai_scheduler_step",
            "kai_pod_grouper_step",
            "scheduling_step",
            "bind_pod",
            "karpenter_step",
            "mig_manager_step",
            "set_mig_manager",
            "tick",
            "advance_clock",
            "set_clock",
            "start_controllers",
            "stop_controllers",
            "chaos_status",
            "not_ready_nodes",
            "create",
            "upsert",
            "get",
            "update",
            "delete",
            "list",
            "delete_namespace",
            "access_log",
            "reset_access_log",
            "set_pod_gpu_utilization",
            "dcgm_devices",
        }
    )

    def _control_args(self, op: str, args: Obj) -> Obj:
        """Validate and convert the JSON body of ``POST /_emulator/<op>`` into keyword arguments."""
        if op not in self._CONTROL_OPS:
            raise ApiError(404, f"unknown emulator operation {op!r}", "NotFound")
        args = dict(args)
        # {"make": {...}} builds the object with the factories: handy from curl.
        if op in ("add_node", "upsert_node", "add_pod", "upsert_pod") and "make" in args:
            make = dict(args.pop("make"))
            try:
                args["obj"] = (
                    make_node(make.pop("name"), **make) if "node" in op else make_pod(make.pop("name"), **make)
                )
            except (KeyError, TypeError) as exc:
                raise ApiError(400, f"bad factory arguments for {op}: {exc}", "BadRequest") from exc
        if op in ("update_node", "update_pod", "update") and "patch" in args:
            args["fn_or_patch"] = args.pop("patch")
        if op == "set_offline":
            # Over HTTP "reset" is the default: with "refuse" nothing could reach us to come back.
            args.setdefault("mode", "reset")
            if args.get("offline", True) and args["mode"] == "refuse" and args.get("duration") is None:
                raise ApiError(400, "set_offline over HTTP with mode=refuse needs a duration", "BadRequest")
            if args["mode"] not in ("refuse", "reset"):
                raise ApiError(400, f"unknown offline mode {args['mode']!r}", "BadRequest")
        if op in ("chaos_step", "karpenter_step", "kueue_step", "tick") and "now" in args:
            raise ApiError(400, f"{op} reads the emulator's clock and takes no 'now': start the emulator with a "
                                "ManualClock and move it (POST /_emulator/set_clock or advance_clock)", "BadRequest")
        if op == "chaos_step":
            args = {"rng": random.Random(args["seed"])} if "seed" in args else {}
        return args

    def _control_call(self, op: str, args: Obj) -> Any:
        try:
            return getattr(self, op)(**args)
        except TypeError as exc:
            raise ApiError(400, f"bad arguments for {op}: {exc}", "BadRequest") from exc


