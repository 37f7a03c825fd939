"""Instant queries against a Prometheus HTTP API (GET /api/v1/query), standard library only."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

TIMEOUT_S = 30


class PrometheusError(Exception):
    """The query failed or Prometheus refused it; the message names the URL and the query."""


def query(base_url: str, promql: str) -> list[tuple[dict[str, str], float]]:
    """Each series of an instant vector as (labels, value)."""
    url = f"{base_url.rstrip('/')}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT_S) as answer:
            body: dict[str, Any] = json.loads(answer.read())
    except (urllib.error.URLError, OSError, json.JSONDecodeError) as error:
        raise PrometheusError(f"{base_url}: `{promql}`: {error}") from error
    if body.get("status") != "success":
        raise PrometheusError(f"{base_url}: `{promql}`: {body.get('error', body)}")
    return [
        (dict(series.get("metric", {})), float(series["value"][1]))
        for series in body["data"]["result"]
    ]


def total(base_url: str, promql: str) -> float | None:
    """The sum over all series, or None when the query returns none."""
    series = query(base_url, promql)
    return sum(value for _, value in series) if series else None
