"""Fixtures of the kubesim tests: an emulator on a free port, its kubeconfig, clients and kubectl."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from kubesim import KubeEmulator

KUBECTL = shutil.which("kubectl") or "/usr/bin/kubectl"
# CI sets this: there a missing kubectl is a failure, not a skip.
REQUIRE_KUBECTL = os.environ.get("CONSOLE_REQUIRE_KUBECTL") == "1"


@pytest.fixture
def sim_kubeconfig(sim: KubeEmulator, tmp_path: Path) -> str:
    return sim.write_kubeconfig(tmp_path / "kubeconfig")


@pytest.fixture
def kubectl(sim_kubeconfig: str, tmp_path: Path) -> Callable[..., subprocess.CompletedProcess[str]]:
    """Run the real kubectl against the emulator: ``kubectl("get", "nodes")``; ``input=`` is its stdin."""
    if not os.path.exists(KUBECTL):
        if REQUIRE_KUBECTL:
            pytest.fail(f"CONSOLE_REQUIRE_KUBECTL=1 but kubectl is missing ({KUBECTL})")
        pytest.skip("kubectl is not installed (set CONSOLE_REQUIRE_KUBECTL=1 to make this a failure)")
    env = {**os.environ, "KUBECONFIG": sim_kubeconfig, "HOME": str(tmp_path), "KUBECACHEDIR": str(tmp_path / "cache")}

    def run(*args: str, input: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [KUBECTL, *args], input=input, env=env, capture_output=True, text=True, timeout=60, check=False
        )
        if check and proc.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({proc.returncode}): {proc.stderr}")
        return proc

    run.env = env  # type: ignore[attr-defined]
    return run


@pytest.fixture
def manual_sim(emulators) -> KubeEmulator:
    """An emulator on a manual clock with its controllers (Job controller, schedulers, kubelets): a test
    moves the clock and calls ``tick()``."""
    from kubesim import ManualClock

    return emulators(clock=ManualClock(), controllers=True, bookmark_interval=1.0)


@pytest.fixture
def manual_api(manual_sim: KubeEmulator, tmp_path: Path) -> Iterator[Any]:
    """The official client's ApiClient for :func:`manual_sim`."""
    from kubernetes import client, config

    configuration = client.Configuration()
    config.load_kube_config(config_file=manual_sim.write_kubeconfig(tmp_path / "manual-kubeconfig"),
                            client_configuration=configuration)
    with client.ApiClient(configuration) as api:
        yield api
