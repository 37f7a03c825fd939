"""`sparkrack bench | cost | doctor` on the command line: help texts, and errors that name the
stack and the node."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from sparkrack.cli import main
from sparkrack.cli import sim as sim_cli
from sparkrack.cli.options import guarded
from sparkrack.sim.shell import SimError
from sparkrack.sim.topology import SimTopology

from .support import STACKS, cluster

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("command", "options"),
    [
        ("bench", ["--endpoint", "--model", "--prompt-tokens", "--max-tokens", "--repetitions",
                   "--warmups", "--concurrency", "--json", "--out", "--compare", "--stack"]),
        ("cost", ["--tariff", "--currency", "--tokens-per-day", "--input-share", "--prometheus",
                  "--window", "--prices", "--exchange-rate", "--node-watts", "--hardware-cost",
                  "--years", "--json", "--stack"]),
        ("doctor", ["--stack", "--json"]),
    ],
)  # fmt: skip
def test_help_explains_every_option(
    command: str, options: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as done:
        main([command, "--help"])

    text = capsys.readouterr().out
    assert done.value.code == 0
    for option in options:
        assert option in text, option
    assert "show this help message" in text
    assert text.count("(default") >= (2 if command != "doctor" else 0)


def test_doctor_help_says_it_is_read_only_and_probes_cables(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        main(["doctor", "--help"])

    text = " ".join(capsys.readouterr().out.split())
    assert "read-only" in text
    assert "corrected map" in text


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["bench", "--concurrency", "1,0"], "expected stream counts such as 1,2,4,8"),
        (["bench", "--repetitions", "0"], "expected a positive integer, not '0'"),
        (["bench", "--warmups", "two"], "expected a positive integer, not 'two'"),
        (["cost", "--tariff", "1.04", "--currency", "zł"], "one of the arguments"),
        (["cost", "--tariff", "-1", "--currency", "zł", "--tokens-per-day", "5"],
         "expected a positive number"),
        (["cost", "--tariff", "1", "--currency", "zł", "--tokens-per-day", "5",
          "--input-share", "1.5"], "expected a fraction from 0 to 1"),
    ],
)  # fmt: skip
def test_usage_errors_exit_2_with_one_line(
    args: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*args, "--stack", "sim-2", "--stacks-dir", str(STACKS)]) == 2

    err = capsys.readouterr().err
    assert says in err
    assert "Traceback" not in err


def test_a_sim_failure_is_one_line_and_exit_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def no_rack(stack: str) -> SimTopology:
        raise SimError(f"stack {stack}: not a simulated stack")

    monkeypatch.setattr(sim_cli, "topology_for", no_rack)
    assert main(["sim", "status", "gb10-2"]) == 2
    assert capsys.readouterr().err == "sparkrack sim: stack gb10-2: not a simulated stack\n"


def test_only_the_errors_named_are_turned_into_one_line() -> None:
    assert guarded("sparkrack x", (SimError,), lambda: 3) == 3
    with pytest.raises(ZeroDivisionError):
        guarded("sparkrack x", (SimError,), lambda: 1 // 0)


def test_bench_error_names_the_stack(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPARKRACK_API_KEY", "k")  # sim-2's API asks for its key
    args = ["bench", "--stack", "sim-2", "--stacks-dir", str(STACKS), "--endpoint", "ftp://x"]

    assert main(args) == 2

    assert capsys.readouterr().err == (
        "sparkrack bench: stack sim-2: ftp://x: expected http://HOST:PORT\n"
    )


def test_cost_error_names_the_stack_and_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["cost", "--stack", "sim-2", "--stacks-dir", str(STACKS), "--tariff", "1"]
    args += ["--currency", "zł", "--tokens-per-day", "5", "--prices", str(tmp_path / "no.yaml")]

    assert main(args) == 2

    err = capsys.readouterr().err
    assert err.startswith(f"sparkrack cost: stack sim-2: --prices {tmp_path / 'no.yaml'}: ")


def test_doctor_names_each_node_it_cannot_reach(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    raw = cluster("sim-2")
    raw["ssh"]["known_hosts"] = str(tmp_path / "missing_known_hosts")
    (tmp_path / "Pulumi.lost.yaml").write_text(
        yaml.safe_dump({"config": {"sparkrack:cluster": raw}})
    )

    assert main(["doctor", "--stack", "lost", "--stacks-dir", str(tmp_path)]) == 1

    out = capsys.readouterr().out
    for node, address in (("spark-1", "198.18.0.11"), ("spark-2", "198.18.0.12")):
        assert f"FAIL    {node}  ssh" in out
        assert f"node {node} ({address}): cannot read known_hosts" in out
    assert out.rstrip().endswith("stack lost: NOT ready: 0 ok, 2 FAIL, 8 skipped")
