"""The verify report: checks down, nodes across, then every failure and skip with its reason."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from typing import Any

Result = dict[str, Any]
MARK = {"passed": "PASS", "failed": "FAIL", "skipped": "SKIP"}


def cell(outcomes: Sequence[str]) -> str:
    """FAIL beats PASS beats SKIP; a count when the check ran more than once on the node."""
    counts = Counter(outcomes)
    for outcome in ("failed", "passed", "skipped"):
        if counts[outcome]:
            shown = MARK[outcome]
            if len(outcomes) > 1:
                shown += f" {counts[outcome]}/{len(outcomes)}"
            return shown
    return "-"


def matrix(results: Sequence[Result], nodes: Sequence[str]) -> str:
    columns = [*nodes, *sorted({r["node"] for r in results} - set(nodes))]
    grouped: dict[tuple[str, str], dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for r in results:
        grouped[(r["category"], r["check"])][r["node"]].append(r["outcome"])
    rows = [["CATEGORY", "CHECK", *columns]]
    for category, check in sorted(grouped, key=lambda key: category_order(key[0])):
        by_node = grouped[(category, check)]
        rows.append([category, check, *(cell(by_node.get(node, [])) for node in columns)])
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(text.ljust(width) for text, width in zip(row, widths, strict=True)).rstrip()
        for row in rows
    )


CATEGORIES = ("ssh", "listeners", "fabric", "cpu", "podman", "inference", "monitoring")


def category_order(category: str) -> int:
    return CATEGORIES.index(category) if category in CATEGORIES else len(CATEGORIES)


def failures(results: Sequence[Result]) -> list[str]:
    return [
        f"FAIL {r['node']} {r['id']}: {r['detail']}" for r in results if r["outcome"] == "failed"
    ]


def skips(results: Sequence[Result]) -> list[str]:
    reasons = Counter(r["detail"] for r in results if r["outcome"] == "skipped")
    return [f"SKIP {count} x {reason}" for reason, count in reasons.most_common()]


def summary(stack: str, results: Sequence[Result], seconds: float) -> str:
    counts = Counter(r["outcome"] for r in results)
    verdict = "FAILED" if counts["failed"] else "passed"
    return (
        f"stack {stack}: {verdict}: {counts['passed']} passed, {counts['failed']} failed, "
        f"{counts['skipped']} skipped in {seconds:.1f} s"
    )


def render(stack: str, nodes: Sequence[str], results: Sequence[Result], seconds: float) -> str:
    parts = [matrix(results, nodes)]
    if problems := failures(results):
        parts.append("\n".join(problems))
    if skipped := skips(results):
        parts.append("\n".join(skipped))
    parts.append(summary(stack, results, seconds))
    return "\n\n".join(parts)
