"""`sparkrack bench` and `sparkrack doctor` against a private copy of sim-2 (stack e2e-ops).

The engine stand-in is shipped into spark-1's rootless Podman (`podman save | ssh podman load`,
as the inference role ships images) and serves on the head's management address with host
networking, so bench measures the stack's own endpoint. Doctor runs first on the fresh fabric
(ports down, as a new box ships), against a stack that declares the crossed cables straight;
then on a fabric configured by hand with one port left at MTU 1500.

Module order matters: bench, crossed, MTU.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkrack.cli import main
from sparkrack.config.decode_files import read_rows
from sparkrack.config.load import load_stack_file
from sparkrack.plan import make_plan
from sparkrack.sim.keys import known_hosts_path, login_key, ssh_command
from sparkrack.sim.standin.image import LATEST, ensure_standin_image
from sparkrack.sim.topology import SimTopology, rdma_device_for

from .conftest import REPO
from .sim_fixtures import as_service, fresh, poll, service_user_by_hand, shipped_rack, ssh

pytestmark = pytest.mark.e2e

STACK = "e2e-ops"
STRAIGHT = "e2e-ops-straight"
PREFIX = "198.18.9"
HEAD = f"{PREFIX}.11"
TOKEN_RATE = 50.0
STANDIN = "sparkrack-bench-standin"
FABRIC_PORTS = ("enp1s0f0np0", "enP2p1s0f0np0", "enp1s0f1np1", "enP2p1s0f1np1")


@pytest.fixture(scope="module")
def sim() -> Iterator[SimTopology]:
    yield from fresh(shipped_rack("sim-2", STACK, PREFIX))


def stack_cluster(cables: list[dict[str, str]] | None = None) -> dict[str, Any]:
    """sim-2 moved to the private /24 and the private cluster's SSH material."""
    document = yaml.safe_load((REPO / "stacks" / "Pulumi.sim-2.yaml").read_text())
    raw: dict[str, Any] = document["config"]["sparkrack:cluster"]
    raw["ssh"]["key_path"] = str(login_key(STACK))
    raw["ssh"]["known_hosts"] = str(known_hosts_path(STACK))
    for node in raw["nodes"]:
        node["address"] = f"{PREFIX}.{node['address'].split('.')[3]}"
    if cables is not None:
        raw["fabric"]["cables"] = cables
    return raw


@pytest.fixture(scope="module")
def stacks(sim: SimTopology, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """e2e-ops as sim-2 declares it (crossed, as wired), and e2e-ops-straight, which declares
    the same rack's cables straight."""
    directory = tmp_path_factory.mktemp("stacks")
    straight = [
        {"a": "spark-1:port0", "b": "spark-2:port0"},
        {"a": "spark-1:port1", "b": "spark-2:port1"},
    ]
    for name, raw in ((STACK, stack_cluster()), (STRAIGHT, stack_cluster(straight))):
        document = {"config": {"sparkrack:cluster": raw}}
        (directory / f"Pulumi.{name}.yaml").write_text(yaml.safe_dump(document))
    return directory


@pytest.fixture(scope="module")
def standin(stacks: Path) -> Iterator[str]:
    """The stand-in serving the plan's model name on the head at TOKEN_RATE tok/s per stream."""
    plan = make_plan(load_stack_file(STACK, stacks))
    ensure_standin_image(print)
    image = LATEST  # the name the stack declares, so doctor finds it on the node
    # The service user as `up` makes it, with linger, which keeps its containers running after
    # this SSH session ends; spark-2 is left as it is before any `up`.
    ssh(STACK, "spark-1", "sudo -n sh -c " + shlex.quote("; ".join(service_user_by_hand(plan))))
    load = shlex.join(ssh_command(STACK, "spark-1", as_service("podman load -q")))
    ship = subprocess.run(
        f"podman save {image} | {load}", shell=True, capture_output=True, text=True, timeout=300
    )
    assert ship.returncode == 0, ship.stderr
    serve = (
        "ray start --head --num-gpus 1 --num-cpus 1 --node-ip-address 127.0.0.1 --port 0"
        " --object-store-memory 100000000 --disable-usage-stats > /tmp/ray-start.log 2>&1 &&"
        f" exec vllm serve test/model --host {HEAD} --port {plan.serving.port}"
        f" --served-model-name {plan.serving.served_model_name} --max-num-seqs 4"
        f" --distributed-executor-backend ray --token-rate {TOKEN_RATE:g}"
    )
    # The GPU as the inference role gives it: by CDI name, from the spec the node's nvidia-ctk
    # writes (the stand-in refuses to start without a GPU, as vLLM does).
    ssh(STACK, "spark-1", "sudo nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml")
    run = (
        f"podman run -d --name {STANDIN} --network host --ulimit host --shm-size 256m"
        f" --device nvidia.com/gpu=all {image}"
    )
    ssh(STACK, "spark-1", as_service(f"{run} sh -c '{serve}'"))
    url = f"http://{HEAD}:{plan.serving.port}"
    try:
        wait_for_health(url)
        yield url
    finally:
        ssh(STACK, "spark-1", as_service(f"podman rm -f -t 0 {STANDIN}"), check=False)


def wait_for_health(url: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as answer:
                if answer.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError):
            time.sleep(0.5)
    logs = ssh(STACK, "spark-1", as_service(f"podman logs {STANDIN} 2>&1 | tail -20"), check=False)
    pytest.fail(f"stand-in on {url}: no /health within {timeout:.0f}s:\n{logs}")


def bench(stacks: Path, out: Path, *extra: str) -> int:
    args = ["bench", "--stack", STACK, "--stacks-dir", str(stacks), "--out", str(out)]
    args += ["--prompt-tokens", "32", "--max-tokens", "64", "--repetitions", "3"]
    return main([*args, "--concurrency", "1,2,4", *extra])


def test_bench_measures_the_token_rate_and_keeps_the_cold_run_apart(
    stacks: Path, standin: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert bench(stacks, tmp_path, "--json") == 0

    result = json.loads(capsys.readouterr().out)
    assert result["settings"]["endpoint"] == standin
    decode = sorted(s["decode_tok_s"] for s in result["single"])
    assert abs(decode[1] - TOKEN_RATE) / TOKEN_RATE < 0.05, decode
    assert len(result["cold"]) == 1 and len(result["single"]) == 3
    four = result["levels"][-1]
    assert four["streams"] == 4
    assert four["aggregate_tok_s"] > 3.5 * TOKEN_RATE, four
    stems = {path.suffix: path for path in tmp_path.iterdir()}
    assert set(stems) == {".json", ".png", ".yaml"}
    assert stems[".png"].read_bytes()[:4] == b"\x89PNG"
    assert json.loads(stems[".json"].read_text()) == result
    # The row `sparkrack estimate --calibration` refits with: this rack's measured decode.
    [row] = read_rows([stems[".yaml"]])
    assert row.tok_s == pytest.approx(decode[1], rel=0.01)


def test_bench_table_compares_with_the_last_run(
    stacks: Path, standin: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert bench(stacks, tmp_path) == 0
    capsys.readouterr()

    assert bench(stacks, tmp_path, "--compare") == 0

    out = capsys.readouterr().out
    assert "cold (not counted)" in out
    assert "decode tok/s (1/TPOT)" in out
    expected = make_plan(load_stack_file(STACK, stacks)).performance.decode_tok_s_expected
    assert re.search(rf"\bexpected\s+{expected:.1f}\s", out), out  # the plan's estimate beside it
    assert "since " in out and "single-stream decode tok/s" in out
    assert len(list(tmp_path.glob("*.png"))) == 2


def fabric_links(node: str) -> dict[str, dict[str, Any]]:
    return {link["ifname"]: link for link in json.loads(ssh(STACK, node, "ip -j link show"))}


def test_doctor_finds_crossed_cables_declared_straight(
    sim: SimTopology, stacks: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["doctor", "--stack", STRAIGHT, "--stacks-dir", str(stacks)]) == 1

    out = capsys.readouterr().out
    assert "Cable map: the cables are CROSSED (port 0 meets port 1)" in out, out
    assert "FAIL    spark-1  cable enp1s0f0np0 -> spark-2:enp1s0f0np0" in out
    assert "wired to spark-2:enp1s0f1np1 instead" in out
    corrected = (
        "    cables:\n"
        '      - {a: "spark-1:port0", b: "spark-2:port1"}\n'
        '      - {a: "spark-1:port1", b: "spark-2:port0"}\n'
    )
    assert corrected in out
    # The probe raised the fresh ports only for itself: they are down again.
    for node in ("spark-1", "spark-2"):
        links = fabric_links(node)
        assert [p for p in FABRIC_PORTS if "UP" in links[p]["flags"]] == [], node


def configure_fabric_by_hand(stacks: Path) -> None:
    """What the fabric role will do, in its order: up, MTU, then the address."""
    plan = make_plan(load_stack_file(STACK, stacks))
    for node in plan.nodes:
        steps = [
            f"sudo ip link set dev {link.netdev} up && sudo ip link set dev {link.netdev} mtu"
            f" {link.mtu} && sudo ip addr replace {link.address} dev {link.netdev}"
            for link in node.links
        ]
        ssh(STACK, node.name, " && ".join(steps))
    for node in plan.nodes:
        wait_for_ports_active(node.name, [rdma_device_for(link.netdev) for link in node.links])


def wait_for_ports_active(node: str, devices: list[str]) -> None:
    """An RDMA port reaches ACTIVE a moment after its carrier, on an mlx5 as in the simulator:
    the checks that follow must read the settled fabric, as an operator's would."""
    states = " ".join(f"$(cat /sys/class/infiniband/{d}/ports/1/state)" for d in devices)
    settled = poll(lambda: ssh(STACK, node, f'echo "{states}"'), lambda r: "DOWN" not in r, 30)
    assert "DOWN" not in settled, f"{node}: RDMA ports {devices} still read {settled}"


def test_doctor_reports_mtu_1500_on_a_fabric_port(
    sim: SimTopology, stacks: Path, standin: str, capsys: pytest.CaptureFixture[str]
) -> None:
    configure_fabric_by_hand(stacks)
    ssh(STACK, "spark-2", "sudo ip link set dev enp1s0f0np0 mtu 1500")

    assert main(["doctor", "--stack", STACK, "--stacks-dir", str(stacks)]) == 1

    out = capsys.readouterr().out
    failures = [line.split()[:4] for line in out.splitlines() if line.startswith("  FAIL")]
    assert failures == [
        ["FAIL", "spark-2", "MTU", "enp1s0f0np0"],
        ["FAIL", "spark-1", "jumbo", "ping"],
    ], out
    assert "MTU 1500, plan 9000" in out
    assert "jumbo ping enp1s0f1np1 -> spark-2:enp1s0f0np0" in out
    assert "ok      spark-1  cable enp1s0f0np0 -> spark-2:enp1s0f1np1" in out
    assert "Cable map" not in out
    # The image is on spark-1 only (the standin fixture shipped it there): spark-2's env is
    # not checked, spark-1's is, and is clean.
    skipped = [line.split()[1:4] for line in out.splitlines() if line.startswith("  skip")]
    assert skipped == [["spark-2", "image", "env"]], out
    assert "ok      spark-1  NCCL_IB_DISABLE" in out and "the image)" in out
