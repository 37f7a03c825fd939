"""`sparkrack cost`: running cost against API prices, as seed 001 worked it out by hand.

Power is per node, from the hardware profile (assumed: a GB10 has no wall-power sensor) or from
the GPU exporter (measured, GPU board only). Energy is counted as flat through the day, as the
seed did. A payback time is printed only when it falls within the amortisation period: over a
mostly idle machine it is arithmetic without meaning (seed 001's dashboard read 58.8 years).
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Literal

import yaml
from pydantic import Field, ValidationError

from sparkrack.config.yamlload import load_yaml
from sparkrack.stackspec import StrictModel

HOURS_PER_DAY = 24
DAYS_PER_YEAR = 365
SECONDS_PER_DAY = 86_400


class CostError(Exception):
    """Bad cost input (a price file, a rate); the message names the file or option."""


class ApiPrice(StrictModel):
    name: str
    input_per_mtok: float = Field(ge=0)
    output_per_mtok: float = Field(ge=0)

    def blended_per_mtok(self, input_share: float) -> float:
        return input_share * self.input_per_mtok + (1 - input_share) * self.output_per_mtok


class PriceTable(StrictModel):
    example: bool = False
    currency: str
    exchange_rates: dict[str, float] = Field(default_factory=dict)
    apis: tuple[ApiPrice, ...] = Field(min_length=1)

    def rate_to(self, currency: str, override: float | None) -> float:
        """Units of `currency` per unit of the table's currency."""
        if override is not None:
            return override
        if currency == self.currency:
            return 1.0
        if currency in self.exchange_rates:
            return self.exchange_rates[currency]
        known = ", ".join(sorted(self.exchange_rates)) or "none"
        raise CostError(
            f"no exchange rate from {self.currency} to {currency} in the price table"
            f" (it has: {known}); pass --exchange-rate"
        )


def load_prices(path: Path | None) -> PriceTable:
    """The user's price file, or the shipped example table."""
    where = str(path) if path else "the shipped catalog/prices.yaml"
    try:
        text = (
            path.read_text()
            if path
            else resources.files("sparkrack.catalog").joinpath("prices.yaml").read_text()
        )
        return PriceTable.model_validate(load_yaml(text))
    except OSError as error:
        raise CostError(f"--prices {path}: {error.strerror}") from None
    except (yaml.YAMLError, ValidationError) as error:
        raise CostError(f"{where}: {_first_line(error)}") from None


def _first_line(error: Exception) -> str:
    lines = str(error).splitlines()
    return "; ".join(lines[:3]) if lines else type(error).__name__


class NodePower(StrictModel):
    node: str
    watts: float
    source: Literal["assumed", "measured"]
    note: str


class Traffic(StrictModel):
    tokens_per_day: float = Field(ge=0)
    input_share: float = Field(ge=0, le=1)
    source: str


def kwh_per_day(watts: float) -> float:
    return watts * HOURS_PER_DAY / 1000


def api_cost_per_day(price: ApiPrice, traffic: Traffic, rate: float) -> float:
    return traffic.tokens_per_day / 1e6 * price.blended_per_mtok(traffic.input_share) * rate


def break_even_tokens_per_day(
    daily_cost: float, price: ApiPrice, input_share: float, rate: float
) -> float | None:
    """Tokens a day at which the API would cost what running the rack does; None for a free API."""
    per_token = price.blended_per_mtok(input_share) * rate / 1e6
    return daily_cost / per_token if per_token > 0 else None


def hardware_per_day(hardware_cost: float, years: float) -> float:
    return hardware_cost / (years * DAYS_PER_YEAR)


class Payback(StrictModel):
    """Whether the hardware pays for itself within `years` at today's traffic, and why not."""

    years: float | None  # None: not printed (see verdict)
    verdict: str


def payback(
    api_per_day: float,
    energy_per_day: float,
    hardware_cost: float,
    years: float,
    needed_tokens_per_day: float | None,
    capacity_tokens_per_day: float,
) -> Payback:
    saving = api_per_day - energy_per_day
    if needed_tokens_per_day is None:
        return Payback(years=None, verdict="never: this API is free at this mix")
    if needed_tokens_per_day > capacity_tokens_per_day:
        return Payback(
            years=None,
            verdict=f"never: needs {tokens(needed_tokens_per_day)}/day, more than the rack's"
            f" capacity of {tokens(capacity_tokens_per_day)}/day",
        )
    if saving <= 0:
        return Payback(
            years=None,
            verdict="refused: at this traffic the API costs less than the electricity;"
            f" needs {tokens(needed_tokens_per_day)}/day",
        )
    payback_years = hardware_cost / (saving * DAYS_PER_YEAR)
    if payback_years > years:
        return Payback(
            years=None,
            verdict=f"refused: too little traffic to amortise in {years:g} years;"
            f" needs {tokens(needed_tokens_per_day)}/day",
        )
    return Payback(years=payback_years, verdict=f"pays back in {payback_years:.1f} years")


def tokens(count: float) -> str:
    """Token counts for people: 364k, 1.68M."""
    if count >= 1e6:
        return f"{count / 1e6:.2f}M"
    if count >= 1e3:
        return f"{count / 1e3:.0f}k"
    return f"{count:.0f}"


def parse_window(text: str) -> float:
    """Prometheus durations such as 24h, 90m, 7d, 3600s, in seconds."""
    units = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 604_800}
    number, unit = text[:-1], text[-1:]
    if unit not in units or not number.isdigit() or int(number) == 0:
        raise CostError(f"--window {text!r}: expected a duration such as 24h, 90m or 7d")
    return int(number) * units[unit]
