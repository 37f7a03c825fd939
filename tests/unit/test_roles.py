"""The roles' rendered files and scripts, without a node: IRQ pinning on a captured /proc."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from roles.base.role import hosts_lines, known_hosts_lines
from roles.common import render, token
from roles.cpu_pinning.role import irq_script
from roles.podman.role import config_content
from sparkrack.config.load import load_stack_file
from sparkrack.facts.blocks import block_of, with_block
from sparkrack.plan import make_plan
from sparkrack.resources.network import netplan_file, networkd_file, renderer_for
from sparkrack.stackspec.roles import CpuPinningRoleSpec, PodmanRoleSpec

pytestmark = pytest.mark.unit

GOLDEN = Path(__file__).parent / "golden"
MLX5_IRQS = {"146", "147", "148", "161", "162"}


def fake_proc(root: Path) -> Path:
    proc = root / "proc"
    proc.mkdir()
    shutil.copy(GOLDEN / "gb10-proc-interrupts-mlx5.txt", proc / "interrupts")
    for irq in (*MLX5_IRQS, "11", "14", "96", "180"):
        (proc / "irq" / irq).mkdir(parents=True)
        (proc / "irq" / irq / "smp_affinity").write_text("fffff\n")
    return proc


def test_irq_script_pins_only_mlx5_irqs_to_the_housekeeping_mask(tmp_path: Path) -> None:
    proc = fake_proc(tmp_path)
    script = tmp_path / "irq.sh"
    script.write_text(irq_script(CpuPinningRoleSpec()))
    done = subprocess.run(["sh", str(script), str(proc), "7c1f"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "pinned 5 IRQ(s)" in done.stdout
    masks = {p.parent.name: p.read_text().strip() for p in proc.glob("irq/*/smp_affinity")}
    assert {irq for irq, mask in masks.items() if mask == "7c1f"} == MLX5_IRQS
    assert {mask for irq, mask in masks.items() if irq not in MLX5_IRQS} == {"fffff"}


def test_block_replaces_only_its_own_lines() -> None:
    text = "127.0.0.1 localhost\n"
    once = with_block(text, "cluster", "10.0.0.1 a\n")
    assert with_block(once, "cluster", "10.0.0.1 a\n") == once
    assert block_of(with_block(once, "cluster", "10.0.0.2 b\n"), "cluster") == "10.0.0.2 b\n"
    assert with_block(once, "cluster", None) == text


def test_sim2_hosts_and_known_hosts_name_every_peer() -> None:
    plan = make_plan(load_stack_file("sim-2"))
    assert hosts_lines(plan) == "198.18.0.11 spark-1\n198.18.0.12 spark-2"
    line = known_hosts_lines([(["198.18.0.12", "198.19.0.2"], ["ssh-ed25519 AAAA"])])
    assert line == "198.18.0.12,198.19.0.2 ssh-ed25519 AAAA"


def test_network_stack_is_netplan_where_installed_else_networkd_on_debian() -> None:
    assert renderer_for(("ubuntu", "debian"), netplan_installed=True) == "netplan"
    assert renderer_for(("debian",), netplan_installed=True) == "netplan"
    assert renderer_for(("debian",), netplan_installed=False) == "networkd"
    with pytest.raises(ValueError, match="fedora"):
        renderer_for(("fedora",), netplan_installed=False)


def test_persisted_link_carries_mtu_and_address() -> None:
    link = {"netdev": "enp1s0f0np0", "mtu": 9000, "address": "198.19.0.1/24"}
    assert "MTUBytes=9000\n" in networkd_file(link)
    assert "Address=198.19.0.1/24" in networkd_file(link)
    assert "addresses: [198.19.0.1/24]" in netplan_file(link)
    assert "Address=" not in networkd_file({**link, "address": ""})


def test_podman_config_asks_for_no_default_ulimits() -> None:
    assert "default_ulimits = []" in config_content(
        "containers.conf", "sparkrack", PodmanRoleSpec()
    )
    assert 'runtime = "runc"' in config_content("containers.conf", "sparkrack", PodmanRoleSpec())


def test_templates_refuse_a_missing_value() -> None:
    with pytest.raises(KeyError):
        render("cpu_pinning", "irqbalance")
    assert token("cpu_pinning") == "sparkrack:roles:CpuPinning"
