"""PARTIES resources whose creates must all be in the provider host at once (gate.py)."""

from __future__ import annotations

from gate import PARTIES, Gate  # type: ignore[import-not-found]  # beside it, as the host runs it
from pulumi.dynamic import Resource


class Gated(Resource):
    def __init__(self, name: str) -> None:
        super().__init__(Gate(), name, {"name": name})


for number in range(PARTIES):
    Gated(f"gate-{number}")
