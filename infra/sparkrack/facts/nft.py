"""One nftables table as the kernel holds it, in the words `nft list` prints.

Read from `nft -j list ruleset` (nft's machine interface, stable across versions where its text
layout is not) and written back as lines: per chain `chain <name>`, its hook, then each rule. An
expression this reader does not know is kept as its JSON, so an unfamiliar rule still differs
from the planned ones instead of passing for one of them.
"""

from __future__ import annotations

import json
from typing import Any

from sparkrack.facts import Fact

NAMED_PRIORITIES = {0: "filter"}  # nft prints these by name in a filter chain
QUOTED = frozenset({"iif", "oif", "iifname", "oifname"})  # interface names print in quotes


def nft_table(family: str, table: str) -> Fact[tuple[str, ...] | None]:
    """The table's chains and rules, or None when the node has no such table."""
    # The whole ruleset: listing a missing table fails like a broken nft would.
    return Fact("nft -j list ruleset", lambda out: parse_table(out, family, table), sudo=True)


def parse_table(stdout: str, family: str, table: str) -> tuple[str, ...] | None:
    items = json.loads(stdout)["nftables"]

    def ours(kind: str) -> list[dict[str, Any]]:
        key = "name" if kind == "table" else "table"  # a table names itself; the rest their table
        found = (item[kind] for item in items if kind in item)
        return [each for each in found if (each["family"], each[key]) == (family, table)]

    if not ours("table"):
        return None
    lines: list[str] = []
    for chain in ours("chain"):
        lines += [f"chain {chain['name']}", chain_hook(chain)]
        lines += [
            rule_line(rule["expr"]) for rule in ours("rule") if rule["chain"] == chain["name"]
        ]
    return tuple(lines)


def chain_hook(chain: dict[str, Any]) -> str:
    if "hook" not in chain:
        return "regular chain"
    priority = NAMED_PRIORITIES.get(chain["prio"], str(chain["prio"]))
    return (
        f"type {chain['type']} hook {chain['hook']} priority {priority}; policy {chain['policy']};"
    )


def rule_line(expressions: list[dict[str, Any]]) -> str:
    return " ".join(expression(each) for each in expressions)


def expression(item: dict[str, Any]) -> str:
    if "match" in item:
        match = item["match"]
        left = operand(match["left"])
        op = "" if match["op"] in ("==", "in") else f"{match['op']} "
        return f"{left} {op}{value(match['right'], quoted=left in QUOTED)}"
    if item.keys() in ({"accept"}, {"drop"}):
        return next(iter(item))
    if "reject" in item:
        kind = (item["reject"] or {}).get("type")
        return f"reject with {kind}" if kind == "tcp reset" else json.dumps(item, sort_keys=True)
    return json.dumps(item, sort_keys=True)


def operand(left: dict[str, Any]) -> str:
    if "meta" in left:
        return str(left["meta"]["key"])
    if "payload" in left:
        return f"{left['payload']['protocol']} {left['payload']['field']}"
    return json.dumps(left, sort_keys=True)


def value(right: Any, quoted: bool = False) -> str:
    if isinstance(right, dict) and "set" in right:
        return "{ " + ", ".join(value(each) for each in right["set"]) + " }"
    if isinstance(right, dict) and "range" in right:
        first, last = right["range"]
        return f"{first}-{last}"
    if isinstance(right, dict) and "prefix" in right:
        return f"{right['prefix']['addr']}/{right['prefix']['len']}"
    if isinstance(right, str | int):
        return f'"{right}"' if quoted else str(right)
    return json.dumps(right, sort_keys=True)
