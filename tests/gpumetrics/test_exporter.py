"""The emulator's DCGM exporter endpoint: the real exporter's format and labels, values following the
emulated workloads, settable utilization."""
from __future__ import annotations

import re
import urllib.request

import orjson

from kubesim import make_pod
from kubesim.dcgm import UTILIZATION_ANNOTATION


def scrape(emu) -> str:
    with urllib.request.urlopen(emu.url + "/dcgm/metrics", timeout=5) as response:
        assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        return response.read().decode()


SAMPLE = re.compile(r'^(\w+)\{(.*)\} (\S+)$')


def samples(text: str) -> list[tuple[str, dict[str, str], float]]:
    out = []
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        m = SAMPLE.match(line)
        assert m, line
        labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(2)))
        out.append((m.group(1), labels, float(m.group(3))))
    return out


def test_help_and_type_lines_of_the_dcgm_exporter(gpu_sim):
    text = scrape(gpu_sim)
    for field, help_text in (("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %)."),
                             ("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB)."),
                             ("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB)."),
                             ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "Ratio of time the graphics engine is active.")):
        assert f"# HELP {field} {help_text}\n# TYPE {field} gauge\n" in text


def test_every_gpu_of_every_gpu_node_with_the_exporters_labels(gpu_sim):
    util = [(labels, v) for name, labels, v in samples(scrape(gpu_sim)) if name == "DCGM_FI_DEV_GPU_UTIL"]
    assert sorted((lab["Hostname"], lab["gpu"]) for lab, _ in util) == sorted(
        (node, str(i)) for node in ("a100-1", "a100-2", "v100-1") for i in range(4))  # no CPU node
    labels = next(lab for lab, _ in util if lab["Hostname"] == "a100-1" and lab["gpu"] == "0")
    assert set(labels) == {"gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname", "DCGM_FI_DRIVER_VERSION",
                           "container", "namespace", "pod"}
    assert labels["device"] == "nvidia0" and labels["modelName"] == "NVIDIA A100-SXM4-40GB"
    assert re.fullmatch(r"GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", labels["UUID"])
    assert len({lab["UUID"] for lab, _ in util}) == 12


def test_values_follow_the_pods_holding_the_gpus(gpu_sim):
    got = {(lab["Hostname"], lab["gpu"], name): (lab.get("namespace"), lab.get("pod"), v)
           for name, lab, v in samples(scrape(gpu_sim))}
    # Oldest pod first: busy holds GPUs 0 and 1, idle GPU 2; GPU 3 is free.
    assert got[("a100-1", "0", "DCGM_FI_DEV_GPU_UTIL")] == ("team-a", "busy", 80)
    assert got[("a100-1", "1", "DCGM_FI_DEV_FB_USED")] == ("team-a", "busy", 20000)
    assert got[("a100-1", "1", "DCGM_FI_DEV_FB_FREE")] == ("team-a", "busy", 40960 - 20000)
    assert got[("a100-1", "2", "DCGM_FI_DEV_GPU_UTIL")] == ("team-b", "idle", 2)
    assert got[("a100-1", "2", "DCGM_FI_PROF_GR_ENGINE_ACTIVE")] == ("team-b", "idle", 0.02)
    # An unallocated GPU reads 0 and carries no pod labels.
    assert got[("a100-1", "3", "DCGM_FI_DEV_GPU_UTIL")] == (None, None, 0)
    assert got[("a100-1", "3", "DCGM_FI_DEV_FB_FREE")] == (None, None, 40960)
    assert all(got[("v100-1", str(i), "DCGM_FI_DEV_GPU_UTIL")] == (None, None, 0) for i in range(4))


def test_utilization_is_settable_over_the_control_surface_and_pods_finishing_free_their_gpus(gpu_sim):
    request = urllib.request.Request(
        gpu_sim.url + "/_emulator/set_pod_gpu_utilization", method="POST",
        data=orjson.dumps({"namespace": "team-a", "name": "big", "utilization": 0}))
    with urllib.request.urlopen(request, timeout=5) as response:
        assert orjson.loads(response.read())["ok"]
    pod = gpu_sim.get_pod("team-a", "big")
    assert pod["metadata"]["annotations"][UTILIZATION_ANNOTATION] == "0"
    util = {lab["gpu"]: v for name, lab, v in samples(scrape(gpu_sim))
            if name == "DCGM_FI_DEV_GPU_UTIL" and lab["Hostname"] == "a100-2"}
    assert util == {"0": 0, "1": 0, "2": 0, "3": 0}
    gpu_sim.set_pod_phase("team-a", "busy", "Succeeded")
    holders = {lab["gpu"]: lab.get("pod") for name, lab, _ in samples(scrape(gpu_sim))
               if name == "DCGM_FI_DEV_GPU_UTIL" and lab["Hostname"] == "a100-1"}
    assert holders == {"0": "idle", "1": None, "2": None, "3": None}


def test_deterministic_without_annotations(gpu_sim):
    gpu_sim.add_pod(make_pod("plain", "team-c", node="v100-1",
                             containers=[{"name": "main", "requests": {"nvidia.com/gpu": "1"}}]))
    first, second = scrape(gpu_sim), scrape(gpu_sim)
    assert first == second
    value = next(v for name, lab, v in samples(first) if name == "DCGM_FI_DEV_GPU_UTIL" and lab.get("pod") == "plain")
    assert 35 <= value <= 95


def test_a_node_without_a_running_dcgm_exporter_pod_is_not_exported(gpu_sim):
    # Once the GPU operator's exporter runs somewhere, only the nodes running it are scraped.
    gpu_sim.add_pod(make_pod("nvidia-dcgm-exporter-a100-1", "gpu-operator", node="a100-1",
                             labels={"app": "nvidia-dcgm-exporter"}))
    hosts = {lab["Hostname"] for name, lab, _ in samples(scrape(gpu_sim))}
    assert hosts == {"a100-1"}


def test_the_exporter_answers_while_the_api_server_is_offline(gpu_sim):
    gpu_sim.set_offline(True, mode="reset")
    try:
        assert "DCGM_FI_DEV_GPU_UTIL{" in scrape(gpu_sim)
    finally:
        gpu_sim.set_offline(False)
