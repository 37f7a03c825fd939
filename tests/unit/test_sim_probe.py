"""A node probe that times out means "not ready yet", so the boot wait keeps polling.

CI once failed a whole stack because one `ssh ... systemctl is-system-running` took longer than
20 s on a loaded machine while the node was still booting: the timeout escaped as an error
instead of counting as one more "not yet" before the boot deadline.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sparkrack.sim import cluster, keys, nodes
from sparkrack.sim.shell import SimError


def timing_out(*args: Any, **kwargs: Any) -> Any:
    raise SimError("ssh: timed out after 20s")


@pytest.fixture
def ssh_config_present(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "ssh_config"
    config.write_text("")
    monkeypatch.setattr(keys, "ssh_config_path", lambda stack: config)


@pytest.mark.usefixtures("ssh_config_present")
def test_an_ssh_timeout_falls_back_to_podman_exec(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cluster, "run", timing_out)
    monkeypatch.setattr(nodes, "exec_in", lambda *a, **k: (0, "starting"))
    assert cluster.probe("sim-2", "spark-1") == ("starting", False)


@pytest.mark.usefixtures("ssh_config_present")
def test_both_probes_timing_out_reads_as_unknown(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cluster, "run", timing_out)
    monkeypatch.setattr(nodes, "exec_in", timing_out)
    assert cluster.probe("sim-2", "spark-1") == ("unknown", False)
