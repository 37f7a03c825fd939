"""What the monitoring stack answers, asked from a node with curl: node-exporter's collectors and
how fast its page comes, and Prometheus' HTTP API. Nothing answering is a reading (None)."""

from __future__ import annotations

import json
import re
import shlex
from typing import Any

from sparkrack.facts import Fact

ASK_TIMEOUT_S = 5
COLLECTOR = re.compile(r'^node_scrape_collector_success\{collector="([^"]+)"\}', re.M)


def curl(url: str, *options: str) -> str:
    """A bounded curl of `url`; a failure (refused, timed out, an HTTP error with -f) is a
    reading, not an error."""
    argv = ["curl", *options, "--max-time", str(ASK_TIMEOUT_S), url]
    return f"{shlex.join(argv)} || true"


def parse_collectors(stdout: str) -> set[str] | None:
    """node-exporter's enabled collectors: every one reports node_scrape_collector_success."""
    return set(COLLECTOR.findall(stdout)) if stdout.strip() else None


def exporter_collectors(url: str) -> Fact[set[str] | None]:
    return Fact(curl(url, "-sf"), parse_collectors)


def parse_response_time(stdout: str) -> float | None:
    """`HTTP-code seconds`; None when nothing answered (code 000)."""
    code, _, seconds = stdout.strip().partition(" ")
    return float(seconds) if code.isdigit() and int(code) else None


def response_time(url: str) -> Fact[float | None]:
    # Any HTTP answer counts: the time is what a scrape waits for the page, whatever it says.
    timed = curl(url, "-s", "-o", "/dev/null", "-w", "%{http_code} %{time_total}")
    return Fact(timed, parse_response_time)


def parse_api_data(stdout: str) -> Any:
    """The `data` of a Prometheus API answer; None when nothing answered."""
    return json.loads(stdout)["data"] if stdout.strip() else None


def prometheus_api(url: str, *params: str) -> Fact[Any]:
    """GET `url` (/api/v1/...) with each `name=value` in `params` URL-encoded."""
    encoded = [arg for param in params for arg in ("--data-urlencode", param)]
    return Fact(curl(url, "-sf", "-G", *encoded), parse_api_data)
