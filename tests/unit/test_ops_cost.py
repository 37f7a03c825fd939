"""`sparkrack cost`: seed 001's day reproduced, break-even arithmetic, and the refusals."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkrack.cli import main
from sparkrack.ops.cost import inputs as cost_inputs
from sparkrack.ops.cost import prometheus
from sparkrack.ops.cost.arithmetic import (
    ApiPrice,
    CostError,
    NodePower,
    Traffic,
    api_cost_per_day,
    break_even_tokens_per_day,
    hardware_per_day,
    kwh_per_day,
    load_prices,
    parse_window,
    payback,
)
from sparkrack.ops.cost.report import Hardware, Tariff, cost_report, render_cost

from .support import STACKS

pytestmark = pytest.mark.unit

ZLOTY_PER_USD = 3.7103  # NBP, as seed 001
OPUS = ApiPrice(name="claude-opus-5", input_per_mtok=5, output_per_mtok=25)
# Seed 001's day: 0.36 Mtok at a coding agent's mix, 91% input.
SEED_DAY = Traffic(tokens_per_day=364_250, input_share=0.91, source="seed 001")
PAIR_AT_240_W = [
    NodePower(node=f"gx10-{i}", watts=120, source="assumed", note="seed 001") for i in (1, 2)
]


def test_seed_001_energy_5_76_kwh_costs_5_99_zloty() -> None:
    kwh = kwh_per_day(sum(p.watts for p in PAIR_AT_240_W))

    assert kwh == pytest.approx(5.76)
    assert round(kwh * 1.04, 2) == 5.99


@pytest.mark.parametrize(
    ("api", "zloty"),
    [("claude-opus-5", 9.19), ("claude-sonnet-5", 3.68), ("claude-haiku-4.5", 1.84),
     ("gpt-6-astra", 18.38)],
)  # fmt: skip
def test_the_shipped_example_prices_reproduce_seed_001s_day(api: str, zloty: float) -> None:
    prices = {p.name: p for p in load_prices(None).apis}

    assert round(api_cost_per_day(prices[api], SEED_DAY, ZLOTY_PER_USD), 2) == zloty


def test_break_even_against_opus_is_about_a_quarter_million_tokens_a_day() -> None:
    energy = 5.76 * 1.04

    tokens = break_even_tokens_per_day(energy, OPUS, 0.91, ZLOTY_PER_USD)

    # 5.99 zł / (6.80 USD/Mtok x 3.7103 zł/USD): seed 001 read "roughly 0.24 Mtok/day".
    assert tokens == pytest.approx(237_400, rel=1e-3)


def test_hardware_spread_over_years_adds_to_the_daily_cost() -> None:
    per_day = hardware_per_day(40_000, 3)
    tokens = break_even_tokens_per_day(5.9904 + per_day, OPUS, 0.91, ZLOTY_PER_USD)

    assert per_day == pytest.approx(36.53, abs=0.01)
    assert tokens == pytest.approx(1_685_300, rel=1e-3)


def test_a_free_api_has_no_break_even() -> None:
    free = ApiPrice(name="free", input_per_mtok=0, output_per_mtok=0)

    assert break_even_tokens_per_day(5.99, free, 0.5, 1.0) is None


def test_payback_within_the_period_is_printed() -> None:
    verdict = payback(60.0, 6.0, 40_000, 3, 1_700_000, capacity_tokens_per_day=9_990_000)

    assert verdict.years == pytest.approx(40_000 / (54 * 365))
    assert verdict.verdict == "pays back in 2.0 years"


def test_an_idle_rack_gets_a_refusal_not_58_years() -> None:
    # Seed 001's light day: 9.19 zł of Opus against 5.99 zł of power is 34 years to pay back.
    verdict = payback(9.19, 5.99, 40_000, 3, 1_685_300, capacity_tokens_per_day=9_990_000)

    assert verdict.years is None
    assert verdict.verdict == (
        "refused: too little traffic to amortise in 3 years; needs 1.69M/day"
    )


def test_a_cheaper_api_than_the_power_bill_is_refused() -> None:
    verdict = payback(1.84, 5.99, 40_000, 3, 8_430_000, capacity_tokens_per_day=9_990_000)

    assert verdict.verdict.startswith("refused: at this traffic the API costs less than")


def test_break_even_beyond_capacity_is_never() -> None:
    verdict = payback(1.84, 5.99, 40_000, 3, 8_430_000, capacity_tokens_per_day=3_490_000)

    assert verdict.verdict == ("never: needs 8.43M/day, more than the rack's capacity of 3.49M/day")


@pytest.mark.parametrize(("text", "seconds"), [("24h", 86_400), ("90m", 5_400), ("7d", 604_800)])
def test_window(text: str, seconds: int) -> None:
    assert parse_window(text) == seconds


@pytest.mark.parametrize("text", ["24", "0h", "h", "1.5h", "24x"])
def test_bad_window_names_the_option(text: str) -> None:
    with pytest.raises(CostError, match="--window"):
        parse_window(text)


def test_a_currency_without_a_rate_asks_for_one() -> None:
    with pytest.raises(CostError, match=r"no exchange rate from USD to EUR.*--exchange-rate"):
        load_prices(None).rate_to("EUR", None)


def test_a_bad_price_file_is_named(tmp_path: Path) -> None:
    path = tmp_path / "prices.yaml"
    path.write_text("currency: USD\napis: [{name: x, input_per_mtok: -1, output_per_mtok: 2}]\n")

    with pytest.raises(CostError, match=f"{path}: .*input_per_mtok"):
        load_prices(path)


GOLDEN = """\
sparkrack cost: stack sim-2 at 1.04 zł/kWh

Power
  node    power  source
  gx10-1  120 W  assumed (seed 001)
  gx10-2  120 W  assumed (seed 001)
  total   240 W  assumed
  energy 5.76 kWh/day, cost 5.99 zł/day (flat through the day)

Traffic: 364k tokens/day, 91% input (seed 001)
  capacity 115.6 tok/s = 9.99M tokens/day (bench); utilisation 3.6%

The same tokens at API prices (EXAMPLE prices: edit catalog/prices.yaml or pass --prices; \
3.7103 zł/USD)
  api               in / out per Mtok  same tokens/day  energy only
  claude-opus-5     5 / 25 USD         9.19 zł          local cheaper
  claude-sonnet-5   2 / 10 USD         3.68 zł          API cheaper
  claude-haiku-4.5  1 / 5 USD          1.84 zł          API cheaper
  gpt-6-astra       10 / 50 USD        18.38 zł         local cheaper

Break-even tokens/day
  api               energy only  + 40,000.00 zł over 3 y  payback at this traffic
  claude-opus-5     237k         1.69M                    refused: too little traffic to \
amortise in 3 years; needs 1.69M/day
  claude-sonnet-5   594k         4.21M                    refused: at this traffic the API \
costs less than the electricity; needs 4.21M/day
  claude-haiku-4.5  1.19M        8.43M                    refused: at this traffic the API \
costs less than the electricity; needs 8.43M/day
  gpt-6-astra       119k         843k                     refused: too little traffic to \
amortise in 3 years; needs 843k/day"""


def test_cost_table_golden_on_seed_001s_day() -> None:
    report = cost_report(
        stack="sim-2",
        tariff=Tariff(per_kwh=1.04, currency="zł"),
        power=PAIR_AT_240_W,
        traffic=SEED_DAY,
        prices=load_prices(None),
        exchange_rate=ZLOTY_PER_USD,
        hardware=Hardware(cost=40_000, years=3),
        capacity=(115.6, "bench"),
    )

    assert render_cost(report) == GOLDEN


def test_prometheus_traffic_scales_the_window_to_a_day(monkeypatch: pytest.MonkeyPatch) -> None:
    counters = {"prompt": 30_000.0, "generation": 10_000.0}
    monkeypatch.setattr(
        prometheus, "total",
        lambda url, q: counters["prompt" if "prompt" in q else "generation"],
    )  # fmt: skip

    traffic = cost_inputs.prometheus_traffic("http://prom:9090", "6h", 6 * 3600)

    assert traffic.tokens_per_day == pytest.approx(160_000)
    assert traffic.input_share == pytest.approx(0.75)
    assert traffic.source.startswith("measured")


def test_measured_gpu_power_replaces_the_assumption_only_where_a_series_exists(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from sparkrack.config.load import load_stack_file

    spec = load_stack_file("sim-2", STACKS)
    series = [({"instance": "198.18.0.11:9835", "uuid": "GPU-0"}, 31.5)]
    monkeypatch.setattr(prometheus, "query", lambda url, q: series)

    power = cost_inputs.measured_power(
        "http://prom:9090", "24h", spec, cost_inputs.assumed_power(spec, None)
    )

    assert [(p.node, p.watts, p.source) for p in power] == [
        ("spark-1", 31.5, "measured"),
        ("spark-2", 120, "assumed"),  # the catalogue's per box: seed 001's pair halved
    ]
    assert "GPU board only" in power[0].note


def test_cost_command_prints_the_seed_day(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    args = ["cost", "--stack", "sim-2", "--stacks-dir", str(STACKS), "--tariff", "1.04"]
    args += ["--currency", "zł", "--tokens-per-day", "364250", "--input-share", "0.91"]
    args += ["--node-watts", "120", "--bench-dir", str(tmp_path)]

    assert main(args) == 0

    out = capsys.readouterr().out
    assert "energy 5.76 kWh/day, cost 5.99 zł/day" in out
    assert "claude-opus-5     5 / 25 USD         9.19 zł" in out
    assert "pass --hardware-cost and --years to amortise the hardware" in out
    assert "estimate, one stream" in out  # no bench run in tmp_path


def test_the_default_per_box_is_seed_001s_pair_halved(capsys: pytest.CaptureFixture[str]) -> None:
    """Seed 001 assumed 240 W for its pair (5.76 kWh a day): the catalogue's default per box
    gives the same day, where 240 W a box (the adapter's rating) doubled it."""
    args = ["cost", "--stack", "sim-2", "--stacks-dir", str(STACKS), "--tariff", "1.04"]
    assert main([*args, "--currency", "zł", "--tokens-per-day", "364250"]) == 0
    assert "energy 5.76 kWh/day, cost 5.99 zł/day" in capsys.readouterr().out


def test_gb10_2_reproduces_seed_001s_daily_energy_within_5_percent(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Issue 36's acceptance, on the real stack: seed 001's 5.76 kWh a day for its pair."""
    args = ["cost", "--stack", "gb10-2", "--stacks-dir", str(STACKS), "--tariff", "1.04"]
    assert main([*args, "--currency", "zł", "--tokens-per-day", "364250"]) == 0
    out = capsys.readouterr().out

    kwh = float(out.split("energy ", 1)[1].split(" kWh/day", 1)[0])
    assert kwh == pytest.approx(5.76, rel=0.05)
    assert "total    240 W  assumed" in out


def test_gpu_servers_draw_what_their_profiles_rate(capsys: pytest.CaptureFixture[str]) -> None:
    # h200-8: seed 002's 10.2 kW per server, the DGX H100/H200 maximum: 2 x 10.2 kW x 24 h
    args = ["cost", "--stack", "h200-2", "--stacks-dir", str(STACKS), "--tariff", "1.04"]
    assert main([*args, "--currency", "zł", "--tokens-per-day", "364250"]) == 0
    out = capsys.readouterr().out

    assert "h200-1  10200 W  assumed (hardware profile h200-8" in out
    assert "energy 489.60 kWh/day" in out
