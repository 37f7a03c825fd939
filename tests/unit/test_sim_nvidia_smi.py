"""The stand-in nvidia-smi answers as a GB10's does: memory and fan.speed are [N/A]. Its answers
are held to public captures from real DGX Sparks, cell by cell in shape (the numbers differ)."""

from __future__ import annotations

import re

import pytest

from sparkrack.sim.nvidia_smi import render

pytestmark = pytest.mark.unit

HOST = "spark-1"

# A DGX Spark on driver 580.173.02, as posted in https://github.com/XuehaiPan/nvitop/pull/208
# (comment of 2026-08-07), for this query with --format=csv.
NVITOP_QUERY = "memory.total,memory.used,memory.free,utilization.gpu,power.draw,temperature.gpu"
NVITOP_CAPTURE = (
    "memory.total [MiB], memory.used [MiB], memory.free [MiB], utilization.gpu [%], "
    "power.draw [W], temperature.gpu\n"
    "[N/A], [N/A], [N/A], 0 %, 11.17 W, 35\n"
)
# A DGX Spark at idle in Arm's learning path "dgx_spark_rag" (4_rag_memory_observation.md), for
# --query-gpu=timestamp,<ARM_QUERY> --format=csv,noheader,nounits; the timestamp cell dropped
# here, as the stand-in has no clock field.
ARM_QUERY = "utilization.gpu,utilization.memory,power.draw,temperature.gpu,memory.used"
ARM_CAPTURE = "0, 0, 4.43, 36, [N/A]\n"


def shape(text: str) -> str:
    """The output with every number made N: what must match a real GB10's, cell for cell."""
    return re.sub(r"\d+(\.\d+)?", "N", text)


@pytest.mark.parametrize(
    ("query", "format_option", "capture"),
    [(NVITOP_QUERY, "csv", NVITOP_CAPTURE), (ARM_QUERY, "csv,noheader,nounits", ARM_CAPTURE)],
    ids=["nvitop-208", "arm-learning-path"],
)
def test_answers_in_the_shape_of_a_real_gb10(query: str, format_option: str, capture: str) -> None:
    text, code = render([f"--query-gpu={query}", f"--format={format_option}"], HOST)
    assert code == 0
    assert shape(text) == shape(capture)


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
