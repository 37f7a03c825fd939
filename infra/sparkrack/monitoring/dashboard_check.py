"""Reads a dashboard's JSON the way Grafana will: the panels and their queries, and what in the
layout Grafana would silently ignore or show wrong. Shared by the unit tests and the lint."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

Json = dict[str, Any]
IDLE_TEXT = "idle"


@dataclass(frozen=True)
class PanelQuery:
    panel: str
    ref_id: str
    expr: str
    idle: bool  # the panel maps NaN and no value to "idle"


def panels(dashboard: Json) -> Iterator[Json]:
    """Every panel but rows, top level and inside collapsed rows, in dashboard order."""
    for panel in dashboard.get("panels", []):
        if panel.get("type") == "row":
            yield from panel.get("panels", [])
        else:
            yield panel


def rows(dashboard: Json) -> list[Json]:
    return [panel for panel in dashboard.get("panels", []) if panel.get("type") == "row"]


def shows_idle(panel: Json) -> bool:
    mappings = panel.get("fieldConfig", {}).get("defaults", {}).get("mappings", [])
    return any(
        mapping.get("type") == "special"
        and mapping.get("options", {}).get("match") in ("nan", "null+nan")
        and mapping.get("options", {}).get("result", {}).get("text") == IDLE_TEXT
        for mapping in mappings
    )


def queries(dashboard: Json) -> list[PanelQuery]:
    return [
        PanelQuery(
            panel=panel.get("title", ""),
            ref_id=target.get("refId", ""),
            expr=target["expr"],
            idle=shows_idle(panel),
        )
        for panel in panels(dashboard)
        for target in panel.get("targets", [])
        if target.get("expr")
    ]


def dashboard_problems(dashboard: Json) -> list[str]:
    """What Grafana would get wrong or the seed's layout forbids; empty when the JSON is sound."""
    problems = layout_problems(dashboard)
    variables = {v.get("name") for v in dashboard.get("templating", {}).get("list", [])}
    if "node" not in variables:
        problems.append("no `node` template variable")
    for panel in panels(dashboard):
        title = panel.get("title", f"panel {panel.get('id')}")
        if not panel.get("datasource", {}).get("uid"):
            problems.append(f"{title}: no datasource")
        if not any(target.get("expr") for target in panel.get("targets", [])):
            problems.append(f"{title}: no query")
        if "fan" in title.lower():
            problems.append(f"{title}: GB10 has no fan tachometer (seed 001)")
    ids = Counter(panel.get("id") for panel in [*rows(dashboard), *panels(dashboard)])
    problems += [f"panel id {pid} used {n} times" for pid, n in ids.items() if n > 1]
    return problems


def layout_problems(dashboard: Json) -> list[str]:
    found = rows(dashboard)
    if not found:
        return ["no rows: the seed's layout is collapsible rows"]
    problems = []
    first, *rest = found
    if first.get("collapsed"):
        problems.append(f"row {first.get('title')!r} is the overview and must be open")
    if first.get("panels"):
        # Grafana draws an open row's panels only when they follow it at the top level.
        problems.append(f"open row {first.get('title')!r} holds panels Grafana will not show")
    problems += [f"row {row.get('title')!r} is open" for row in rest if not row.get("collapsed")]
    problems += [f"row {row.get('title')!r} is empty" for row in rest if not row.get("panels")]
    return problems + stray_panels(dashboard)


def stray_panels(dashboard: Json) -> list[str]:
    """Top-level panels above the first row, or below a collapsed row (Grafana folds those into
    that row the first time someone toggles it)."""
    problems, above = [], "above the first row"
    for panel in dashboard.get("panels", []):
        if panel.get("type") == "row":
            above = (
                "" if not panel.get("collapsed") else f"below collapsed row {panel.get('title')!r}"
            )
        elif above:
            problems.append(f"{panel.get('title')}: {above}")
    return problems
