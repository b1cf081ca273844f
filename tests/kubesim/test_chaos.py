"""The demo stays a believable cluster: chaos keeps 3-6 nodes not ready, each for a few minutes.

Deterministic: a seeded random generator and the emulator's manual clock, an hour of 5-second steps (as
``make run``).
No Django needed.
"""

from __future__ import annotations

import random

from kubesim import KubeEmulator, ManualClock, generate_cluster
from kubesim.chaos import FAULTS
from nodepools import kube
from nodepools.demo_cluster import demo_objects

STEP = 5.0  # seconds between chaos steps in `make run`
HOUR = int(3600 / STEP)
WARM_UP = 12  # one minute


def console_reasons(emu: KubeEmulator) -> dict[str, list[str]]:
    """Not-ready reasons of every node as the console computes them (nodepools.kube, docs/concepts.md#not-ready)."""
    pods = emu.list("pods")
    out = {}
    for node in emu.list("nodes"):
        name = node["metadata"]["name"]
        apps = {
            (p["metadata"].get("labels") or {}).get("app")
            for p in pods
            if p["spec"].get("nodeName") == name and p["status"].get("phase") == "Running"
        }
        facts = kube.node_facts(node)
        reasons = kube.node_condition_reasons(node) + kube.missing_operand_reasons(facts.labels, facts.is_gpu_node, apps)
        if reasons:
            out[name] = reasons
    return out


def run_chaos_hour(seed: int, steps: int = HOUR, console_every: int = 6) -> tuple[list[int], set[str], set[str], float]:
    clock = ManualClock()
    emu = KubeEmulator(clock=clock)
    nodes, pods = demo_objects()
    emu.load(nodes=nodes, pods=pods)
    rng = random.Random(seed)
    counts, faults, console, since, longest = [], set(), set(), {}, 0.0
    start = clock.now()
    for step in range(steps):
        now = step * STEP
        clock.set(start + now)
        emu.chaos_step(rng)
        bad = emu.not_ready_nodes()
        if step >= WARM_UP:
            counts.append(len(bad))
        for reasons in bad.values():
            faults.update(reasons)
        if console_every and step % console_every == 0:  # every 30 s: what a person reloading the page sees
            for reasons in console_reasons(emu).values():
                console.update(reasons)
        for name in bad:
            since.setdefault(name, now)
        for name in [n for n in since if n not in bad]:
            longest = max(longest, now - since.pop(name))
    return counts, faults, console, longest


def test_chaos_keeps_three_to_six_demo_nodes_not_ready_for_an_hour_with_every_reason():
    counts, faults, console, longest = run_chaos_hour(seed=1)
    assert min(counts) >= 3 and max(counts) <= 6, sorted(set(counts))
    assert 4 <= sum(counts) / len(counts) <= 5.5  # a steady state, not a drift to either bound
    assert set(FAULTS) <= faults
    # ... and the console itself shows every reason a node can be not ready for (docs/concepts.md#not-ready).
    assert {
        kube.NodeReason.DISK_PRESSURE, kube.NodeReason.MEMORY_PRESSURE, kube.NodeReason.PID_PRESSURE,
        kube.NodeReason.NETWORK_UNAVAILABLE, kube.NodeReason.KUBELET_NOT_READY, kube.NodeReason.NODE_UNREACHABLE,
        kube.NodeReason.SCHEDULING_DISABLED, kube.NodeReason.MISSING_TOOLKIT, kube.NodeReason.MISSING_DCGM,
    } <= console
    # Each node is not ready for a few minutes, then recovers.
    assert 60 <= longest <= 6 * 60 + STEP


def test_chaos_is_deterministic_for_a_seed():
    assert run_chaos_hour(seed=7, steps=200, console_every=0) == run_chaos_hour(seed=7, steps=200, console_every=0)


def test_chaos_brings_an_unhealthy_generated_fleet_back_to_the_steady_state():
    clock = ManualClock()
    emu = KubeEmulator(clock=clock)
    nodes, pods = generate_cluster(30, 60, seed=2)
    emu.load(nodes=nodes, pods=pods)
    for node in nodes[:15]:  # half the fleet down at once
        emu.set_node_condition(node["metadata"]["name"], "Ready", "False")
    rng = random.Random(3)
    emu.chaos_step(rng)
    assert len(emu.not_ready_nodes()) == 6  # the extra ones recover at once
    for _step in range(1, HOUR // 3):
        clock.advance(STEP)
        emu.chaos_step(rng)
        assert 3 <= len(emu.not_ready_nodes()) <= 6


def test_chaos_recovery_restores_operand_pods_and_uncordons():
    clock = ManualClock()
    emu = KubeEmulator(clock=clock)
    nodes, pods = demo_objects()
    emu.load(nodes=nodes, pods=pods)
    rng = random.Random(5)
    emu.chaos_step(rng)
    adopted = emu.chaos_status()["faults"]
    assert {"v100-07", "v100-13", "v100-19", "a100-40gb-05"} <= set(adopted)  # the demo's not-ready nodes
    clock.advance(10_000.0)  # long after every fault time is over
    emu.chaos_step(rng)
    assert not {"v100-07", "v100-13", "v100-19", "a100-40gb-05"} & set(emu.not_ready_nodes())
    assert not emu.get_node("v100-07")["spec"].get("unschedulable")
    assert emu.get_pod("gpu-operator", "nvidia-dcgm-exporter-a100-40gb-05")["status"]["phase"] == "Running"
