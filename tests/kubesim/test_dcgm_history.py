"""The DCGM exporter's past for a real Prometheus (kubesim.dcgm_history): a MIG instance's samples are
DCGM_FI_PROF_GR_ENGINE_ACTIVE (0..1) with its GPU_I_PROFILE / GPU_I_ID, never DCGM_FI_DEV_GPU_UTIL (as NVIDIA's
exporter serves them); a whole GPU's are DCGM_FI_DEV_GPU_UTIL (%) as before, and GR_ENGINE_ACTIVE too."""
from __future__ import annotations

from kubesim.dcgm_history import Gpu, write_openmetrics


def test_a_mig_instance_has_engine_activity_and_no_gpu_util(tmp_path):
    gpus = [Gpu("a100-1", 0, "NVIDIA A100-SXM4-40GB", 40960, lambda t: 50, namespace="ml", pod="train"),
            Gpu("mig-1", 0, "NVIDIA A100-SXM4-80GB", 9728, lambda t: 80, namespace="ml", pod="chat",
                mig_profile="1g.10gb", gpu_instance=3)]
    count = write_openmetrics(tmp_path / "s.om", gpus, start=1000, end=1030, interval=15,
                              metrics=("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_PROF_GR_ENGINE_ACTIVE"))
    lines = [line for line in (tmp_path / "s.om").read_text().splitlines() if not line.startswith("#")]
    util = [line for line in lines if line.startswith("DCGM_FI_DEV_GPU_UTIL{")]
    engine = [line for line in lines if line.startswith("DCGM_FI_PROF_GR_ENGINE_ACTIVE{")]
    assert len(util) == 3 and all('Hostname="a100-1"' in line and "GPU_I_PROFILE" not in line for line in util)
    assert [line.rsplit(" ", 2)[1:] for line in util] == [["50", "1000.000"], ["50", "1015.000"], ["50", "1030.000"]]
    assert len(engine) == 6 and count == 9
    chat = [line for line in engine if 'pod="chat"' in line]
    assert len(chat) == 3
    assert all('GPU_I_PROFILE="1g.10gb",GPU_I_ID="3",Hostname="mig-1"' in line for line in chat)
    assert [line.rsplit(" ", 2)[1] for line in chat] == ["0.8"] * 3
    assert [line.rsplit(" ", 2)[1] for line in engine if 'pod="train"' in line] == ["0.5"] * 3
