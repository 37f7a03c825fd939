"""`sparkrack doctor`'s findings as a table for people, failures first to the eye by status."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from sparkrack.ops.doctor.readings import Finding
from sparkrack.text.table import table


def render_doctor(stack: str, findings: Sequence[Finding], cable_summary: str | None) -> str:
    rows = [(f.status, f.node, f.check, f.observed, f.next_step) for f in findings]
    lines = [
        f"sparkrack doctor: stack {stack}",
        *table(rows, ("status", "node", "check", "observed", "next step")),
    ]
    if cable_summary:
        lines += ["", cable_summary]
    return "\n".join([*lines, "", verdict(stack, findings)])


def verdict(stack: str, findings: Sequence[Finding]) -> str:
    counts = Counter(f.status for f in findings)
    parts = [f"{counts['ok']} ok", f"{counts['FAIL']} FAIL"]
    if counts["todo"]:
        parts.append(f"{counts['todo']} todo (pulumi up configures them)")
    if counts["skip"]:
        parts.append(f"{counts['skip']} skipped")
    state = "NOT ready" if counts["FAIL"] else "ready"
    return f"stack {stack}: {state}: " + ", ".join(parts)


def failed(findings: Sequence[Finding]) -> bool:
    return any(f.status == "FAIL" for f in findings)
