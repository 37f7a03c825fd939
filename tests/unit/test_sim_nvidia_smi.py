"""The stand-in nvidia-smi answers as a GB10's does: memory and fan.speed are [N/A]."""

from __future__ import annotations

import pytest

from sparkrack.sim.nvidia_smi import render

pytestmark = pytest.mark.unit

HOST = "spark-1"


def test_csv_with_header_and_units() -> None:
    text, code = render(
        ["--query-gpu=name,memory.total,fan.speed,power.draw", "--format=csv"], HOST
    )
    assert code == 0
    assert text == (
        "name, memory.total [MiB], fan.speed [%], power.draw [W]\n"
        "NVIDIA GB10, [N/A], [N/A], 11.52 W\n"
    )


def test_csv_noheader_nounits() -> None:
    args = ["--query-gpu", "name, memory.used, utilization.gpu", "--format=csv,noheader,nounits"]
    text, code = render(args, HOST)
    assert (text, code) == ("NVIDIA GB10, [N/A], 0\n", 0)


def test_nounits_keeps_the_header_names_bare() -> None:
    text, _ = render(["--query-gpu=memory.free,temperature.gpu", "--format=csv,nounits"], HOST)
    assert text.splitlines()[0] == "memory.free, temperature.gpu"


def test_list_names_a_stable_uuid_per_host() -> None:
    text, code = render(["-L"], HOST)
    assert code == 0 and text.startswith("GPU 0: NVIDIA GB10 (UUID: GPU-")
    assert render(["-L"], HOST) == (text, 0)
    assert render(["-L"], "spark-2")[0] != text
    uuid_text, _ = render(["--query-gpu=uuid", "--format=csv,noheader"], HOST)
    assert uuid_text.strip() in text


def test_unknown_field_fails_like_the_real_one() -> None:
    text, code = render(["--query-gpu=name,bogus.field", "--format=csv"], HOST)
    assert code == 2
    assert text == 'Field "bogus.field" is not a valid field to query.\n'


def test_query_without_format_is_refused() -> None:
    assert render(["--query-gpu=name"], HOST)[1] == 2


def test_bare_call_prints_a_summary_naming_the_gpu() -> None:
    text, code = render([], HOST)
    assert code == 0 and "NVIDIA GB10" in text and "CUDA Version: 13.0" in text
