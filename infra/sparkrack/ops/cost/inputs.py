"""Where `sparkrack cost` gets its power, traffic and capacity: the stack, Prometheus, or bench.

Each figure carries its source, so the report can say which numbers were measured and which
were assumed.
"""

from __future__ import annotations

from pathlib import Path

from sparkrack.ops.bench.store import latest
from sparkrack.ops.cost import prometheus
from sparkrack.ops.cost.arithmetic import SECONDS_PER_DAY, CostError, NodePower, Traffic
from sparkrack.plan import Plan
from sparkrack.stackspec import ClusterSpec

# The GPU exporter for nvidia-smi (:9835) names board power this way.
GPU_POWER_METRIC = "nvidia_smi_power_draw_watts"


def assumed_power(spec: ClusterSpec, node_watts: float | None) -> list[NodePower]:
    if node_watts is not None:
        note = "--node-watts"
        return [
            NodePower(node=n.name, watts=node_watts, source="assumed", note=note)
            for n in spec.nodes
        ]
    return [
        NodePower(
            node=node.name,
            watts=spec.hardware(node).assumed_power_watts,
            source="assumed",
            note=f"hardware profile {node.hardware}: no wall-power sensor",
        )
        for node in spec.nodes
    ]


def measured_power(
    base_url: str, window: str, spec: ClusterSpec, assumed: list[NodePower]
) -> list[NodePower]:
    """The GPU exporter's mean board power per node over the window; a node without a series
    keeps its assumed figure. Board power is below wall power: the label says so."""
    series = prometheus.query(base_url, f"avg_over_time({GPU_POWER_METRIC}[{window}])")
    by_host: dict[str, float] = {}
    for labels, watts in series:
        host = labels.get("instance", "").rsplit(":", 1)[0]
        by_host[host] = by_host.get(host, 0.0) + watts
    addresses = {node.name: node.address for node in spec.nodes}
    return [
        NodePower(
            node=p.node,
            watts=by_host[addresses[p.node]],
            source="measured",
            note=f"{GPU_POWER_METRIC}, mean over {window}: GPU board only, the wall draws more",
        )
        if addresses[p.node] in by_host
        else p
        for p in assumed
    ]


def declared_traffic(tokens_per_day: float, input_share: float) -> Traffic:
    return Traffic(
        tokens_per_day=tokens_per_day,
        input_share=input_share,
        source="declared (--tokens-per-day, --input-share)",
    )


def prometheus_traffic(base_url: str, window: str, window_s: float) -> Traffic:
    """vLLM's own token counters over the window, scaled to a day."""
    prompt = prometheus.total(base_url, f"sum(increase(vllm:prompt_tokens_total[{window}]))")
    generated = prometheus.total(base_url, f"sum(increase(vllm:generation_tokens_total[{window}]))")
    if prompt is None or generated is None:
        raise CostError(
            f"--prometheus {base_url}: no vllm:prompt_tokens_total or"
            " vllm:generation_tokens_total series; is the vLLM target scraped?"
        )
    both = prompt + generated
    return Traffic(
        tokens_per_day=both * SECONDS_PER_DAY / window_s,
        input_share=prompt / both if both else 0.0,
        source=f"measured: vLLM token counters over {window}, scaled to a day",
    )


def capacity_tok_s(plan: Plan, bench_dir: Path) -> tuple[float, str]:
    """What the rack can generate: the last bench's peak aggregate, else the estimate for one
    stream (concurrency raises it: seed 001 went from 40.4 to 115.6 tok/s with 4 streams)."""
    last = latest(bench_dir, plan.stack) if bench_dir.is_dir() else None
    if last is not None and last.levels:
        return last.peak_aggregate_tok_s(), f"measured: sparkrack bench {last.started_utc}"
    expected = plan.performance.decode_tok_s_expected
    return expected, "estimate, one stream (run `sparkrack bench` for concurrency)"
