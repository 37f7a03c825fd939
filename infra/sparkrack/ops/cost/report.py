"""`sparkrack cost`'s figures put together and rendered: energy, the same tokens at each API's
price, break-even traffic, and the payback verdict."""

from __future__ import annotations

from collections.abc import Sequence

from sparkrack.ops.cost.arithmetic import (
    SECONDS_PER_DAY,
    ApiPrice,
    NodePower,
    Payback,
    PriceTable,
    Traffic,
    api_cost_per_day,
    break_even_tokens_per_day,
    hardware_per_day,
    kwh_per_day,
    payback,
    tokens,
)
from sparkrack.stackspec import StrictModel
from sparkrack.text.table import table


class Tariff(StrictModel):
    per_kwh: float
    currency: str


class Hardware(StrictModel):
    cost: float
    years: float


class ApiRow(StrictModel):
    price: ApiPrice
    cost_per_day: float
    break_even_energy: float | None  # tokens/day
    break_even_hardware: float | None
    payback: Payback | None  # None without --hardware-cost


class CostReport(StrictModel):
    stack: str
    tariff: Tariff
    power: tuple[NodePower, ...]
    traffic: Traffic
    kwh_per_day: float
    energy_cost_per_day: float
    price_currency: str
    exchange_rate: float
    example_prices: bool
    hardware: Hardware | None
    capacity_tok_s: float
    capacity_source: str
    apis: tuple[ApiRow, ...]

    @property
    def capacity_tokens_per_day(self) -> float:
        return self.capacity_tok_s * SECONDS_PER_DAY


def cost_report(
    *,
    stack: str,
    tariff: Tariff,
    power: Sequence[NodePower],
    traffic: Traffic,
    prices: PriceTable,
    exchange_rate: float,
    hardware: Hardware | None,
    capacity: tuple[float, str],
) -> CostReport:
    kwh = kwh_per_day(sum(p.watts for p in power))
    energy = kwh * tariff.per_kwh
    daily_total = energy + (hardware_per_day(hardware.cost, hardware.years) if hardware else 0.0)
    rows = []
    for price in prices.apis:
        api = api_cost_per_day(price, traffic, exchange_rate)
        share = traffic.input_share
        with_hardware = break_even_tokens_per_day(daily_total, price, share, exchange_rate)
        rows.append(
            ApiRow(
                price=price,
                cost_per_day=api,
                break_even_energy=break_even_tokens_per_day(energy, price, share, exchange_rate),
                break_even_hardware=with_hardware if hardware else None,
                payback=payback(
                    api, energy, hardware.cost, hardware.years, with_hardware,
                    capacity[0] * SECONDS_PER_DAY,
                ) if hardware else None,
            )
        )  # fmt: skip
    return CostReport(
        stack=stack,
        tariff=tariff,
        power=tuple(power),
        traffic=traffic,
        kwh_per_day=kwh,
        energy_cost_per_day=energy,
        price_currency=prices.currency,
        exchange_rate=exchange_rate,
        example_prices=prices.example,
        hardware=hardware,
        capacity_tok_s=capacity[0],
        capacity_source=capacity[1],
        apis=tuple(rows),
    )


def render_cost(report: CostReport) -> str:
    sections = [
        [f"sparkrack cost: stack {report.stack} at {_money(report.tariff.per_kwh, report)}/kWh"],
        _power(report),
        _traffic(report),
        _same_tokens(report),
        _break_even(report),
    ]
    return "\n\n".join("\n".join(lines) for lines in sections if lines)


def _money(amount: float, report: CostReport) -> str:
    return f"{amount:,.2f} {report.tariff.currency}"


def _power(report: CostReport) -> list[str]:
    rows: list[tuple[str, ...]] = [
        (p.node, f"{p.watts:g} W", f"{p.source} ({p.note})") for p in report.power
    ]
    total = sum(p.watts for p in report.power)
    sources = sorted({p.source for p in report.power})
    rows.append(("total", f"{total:g} W", " and ".join(sources)))
    energy = (
        f"  energy {report.kwh_per_day:.2f} kWh/day, cost"
        f" {_money(report.energy_cost_per_day, report)}/day (flat through the day)"
    )
    return ["Power", *table(rows, ("node", "power", "source")), energy]


def _traffic(report: CostReport) -> list[str]:
    traffic = report.traffic
    utilisation = traffic.tokens_per_day / report.capacity_tokens_per_day
    return [
        f"Traffic: {tokens(traffic.tokens_per_day)} tokens/day, {traffic.input_share:.0%} input"
        f" ({traffic.source})",
        f"  capacity {report.capacity_tok_s:.1f} tok/s = {tokens(report.capacity_tokens_per_day)}"
        f" tokens/day ({report.capacity_source}); utilisation {utilisation:.1%}",
    ]


def _same_tokens(report: CostReport) -> list[str]:
    label = (
        "EXAMPLE prices: edit catalog/prices.yaml or pass --prices"
        if report.example_prices
        else "prices from --prices"
    )
    rate = f"{report.exchange_rate:g} {report.tariff.currency}/{report.price_currency}"
    rows = [
        (
            row.price.name,
            f"{row.price.input_per_mtok:g} / {row.price.output_per_mtok:g} {report.price_currency}",
            _money(row.cost_per_day, report),
            "local cheaper" if report.energy_cost_per_day < row.cost_per_day else "API cheaper",
        )
        for row in report.apis
    ]
    headers = ("api", "in / out per Mtok", "same tokens/day", "energy only")
    return [f"The same tokens at API prices ({label}; {rate})", *table(rows, headers)]


def _break_even(report: CostReport) -> list[str]:
    hardware = report.hardware
    rows = [
        (
            row.price.name,
            _tokens_or_dash(row.break_even_energy),
            *(
                (_tokens_or_dash(row.break_even_hardware), row.payback.verdict)
                if row.payback
                else ()
            ),
        )
        for row in report.apis
    ]
    headers: tuple[str, ...] = ("api", "energy only")
    if hardware is None:
        note = "  pass --hardware-cost and --years to amortise the hardware"
        return ["Break-even tokens/day", *table(rows, headers), note]
    amortised = f"+ {_money(hardware.cost, report)} over {hardware.years:g} y"
    return ["Break-even tokens/day", *table(rows, (*headers, amortised, "payback at this traffic"))]


def _tokens_or_dash(count: float | None) -> str:
    return "-" if count is None else tokens(count)
