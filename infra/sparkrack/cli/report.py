"""Plans and estimates as text tables for people (the CLI's non-JSON output)."""

from __future__ import annotations

import shlex
from collections.abc import Sequence

from sparkrack.plan import Estimate, NodePlan, Plan
from sparkrack.plan.engine import vllm_command
from sparkrack.plan.fit import FitReport
from sparkrack.plan.parallel import ParallelLayout
from sparkrack.plan.perf import PerfEstimate
from sparkrack.plan.rollout import BlastRadius
from sparkrack.text.byte_units import decimal_bytes, gib
from sparkrack.text.table import table


def render_plan(plan: Plan) -> str:
    return _sections(
        [f"sparkrack plan: stack {plan.stack} (digest {plan.digest()[:12]})", *_takeover(plan)],
        _fit(plan.fit),
        _layout(plan.layout),
        _fabric(plan),
        _pings(plan),
        _nccl(plan.nodes),
        _cpus(plan.nodes),
        _targets(plan),
        _serving(plan),
        _performance(plan.performance),
        _concurrency(plan.performance),
    )


def render_estimate(estimate: Estimate) -> str:
    layout = estimate.layout
    title = (
        f"sparkrack estimate: {estimate.fit.model} on {estimate.hardware}"
        f" (tp {layout.tensor_parallel_size} x pp {layout.pipeline_parallel_size})"
    )
    return _sections(
        [title],
        _fit(estimate.fit),
        _layout(layout),
        _performance(estimate.performance),
        _concurrency(estimate.performance),
    )


def _takeover(plan: Plan) -> list[str]:
    if not plan.takeover:
        return []
    return [f"takes over the nodes these stacks claim: {', '.join(plan.takeover)}"]


def _sections(*sections: list[str]) -> str:
    return "\n\n".join("\n".join(lines) for lines in sections if lines)


def _fit(fit: FitReport) -> list[str]:
    tight = fit.tightest_gpu
    rows = [
        ("weights", decimal_bytes(fit.weight_bytes), _estimated(fit)),
        (
            f"runtime budget x{fit.runtime_budget_factor:g}",
            decimal_bytes(fit.runtime_budget_bytes),
            f"seed 002's minimum, against {decimal_bytes(fit.total_memory_bytes)}"
            f" ({gib(fit.total_memory_bytes)}) of GPU-visible memory",
        ),
        ("after weights", decimal_bytes(fit.after_weights_bytes), "left for KV cache and runtime"),
        (
            f"vLLM cap at {fit.gpu_memory_utilization:g}",
            decimal_bytes(fit.available_bytes),
            "gpu_memory_utilization x visible memory",
        ),
        (
            "KV cache per token",
            decimal_bytes(fit.kv_bytes_per_token),
            f"{fit.kv_cache_bytes_per_element:g} bytes per element; linear-attention state"
            f" {decimal_bytes(fit.state_bytes_per_sequence)} per sequence",
        ),
        (
            "one full sequence",
            decimal_bytes(fit.kv_bytes_per_sequence),
            f"{fit.max_model_len} tokens",
        ),
        (
            "required",
            decimal_bytes(fit.required_bytes),
            f"weights + {decimal_bytes(fit.runtime_reserve_bytes)} runtime reserve"
            " + one full sequence",
        ),
        ("headroom", decimal_bytes(fit.headroom_bytes), "whole cluster, under the vLLM cap"),
        (
            "tightest GPU",
            decimal_bytes(tight.headroom_bytes),
            f"{tight.node}, stage {tight.stage} ({tight.layers} layers):"
            f" {decimal_bytes(tight.required_bytes)} of {decimal_bytes(tight.available_bytes)}",
        ),
        (
            "full sequences",
            fit.max_sequences_at_max_model_len,
            f"of {fit.max_model_len} tokens at once",
        ),
        ("longest context", fit.max_context_single_sequence, "tokens, one sequence"),
    ]
    if fit.concurrency_target is not None:
        verdict = "fit" if fit.concurrency_target_fits else "do not all fit"
        rows.append(("concurrency target", fit.concurrency_target, f"full sequences {verdict}"))
    lines = ["Fit: " + ("FITS" if fit.fits else "DOES NOT FIT"), *table(rows)]
    return [*lines, f"  {fit.verdict}"]


def _estimated(fit: FitReport) -> str:
    shipped = "as shipped"
    if fit.draft_weight_bytes:
        shipped += f", with a {decimal_bytes(fit.draft_weight_bytes)} draft head (one layer)"
    if fit.estimated_weight_bytes is None:
        return shipped
    return (
        f"{shipped}; parameters x bytes/parameter give {decimal_bytes(fit.estimated_weight_bytes)}"
    )


def _layout(layout: ParallelLayout) -> list[str]:
    tp = layout.tensor_parallel_size
    over = f" over {layout.tp_interconnect}" if tp > 1 else ""
    lines = [
        f"Parallel layout (chosen by {layout.chosen_by}): tensor parallel {tp}{over},"
        f" pipeline parallel {layout.pipeline_parallel_size}",
        f"  Ray head and API: {layout.head_node} ({layout.ray_head_address})",
    ]
    if layout.vllm_pp_layer_partition:
        lines.append(f"  VLLM_PP_LAYER_PARTITION={layout.vllm_pp_layer_partition}")
    rows = [
        (s.index, f"{s.first_layer}-{s.first_layer + s.layers - 1}", s.layers, ",".join(s.nodes))
        for s in layout.stages
    ]
    return lines + table(rows, ("stage", "layers", "count", "nodes"))


def _fabric(plan: Plan) -> list[str]:
    rows = [
        (
            node.name,
            link.netdev,
            link.rdma_device or "-",
            link.port,
            link.address or "dhcp",
            link.mtu,
            link.peer,
        )
        for node in plan.nodes
        for link in node.links
    ]
    if not rows:
        return ["Fabric: none (one node)"]
    headers = ("node", "netdev", "rdma", "port", "address", "mtu", "peer")
    return ["Fabric: links in apply order (up, MTU, address)", *table(rows, headers)]


def _pings(plan: Plan) -> list[str]:
    if not plan.jumbo_pings:
        return []
    pings = [
        (
            f"{p.from_node}:{p.from_netdev}",
            f"{p.to_node}:{p.to_netdev}",
            p.to_address or "(dhcp)",
            "crossed" if p.crossed else "",
        )
        for p in plan.jumbo_pings
    ]
    size = plan.jumbo_pings[0].payload_bytes
    ping = shlex.join(["ping", "-M", "do", "-s", str(size)])
    return [f"Jumbo pings ({ping})", *table(pings, ("from", "to", "address", ""))]


def _same_nccl_env(nodes: Sequence[NodePlan]) -> list[tuple[str, dict[str, str]]]:
    """Nodes with identical NCCL env, named together: sixteen identical envs print once."""
    groups: dict[str, tuple[list[str], dict[str, str]]] = {}
    for node in nodes:
        key = repr(sorted(node.nccl_env.items()))
        groups.setdefault(key, ([], node.nccl_env))[0].append(node.name)
    return [(_names(names), env) for names, env in groups.values()]


def _names(names: list[str]) -> str:
    return names[0] if len(names) == 1 else f"{names[0]} .. {names[-1]} ({len(names)} nodes)"


def _nccl(nodes: Sequence[NodePlan]) -> list[str]:
    lines = ["NCCL env"]
    for names, env in _same_nccl_env(nodes):
        lines.append(f"  {names}:")
        lines += [f"    {name}={value}" for name, value in env.items()]
    return lines


def _cpus(nodes: Sequence[NodePlan]) -> list[str]:
    rows = [
        (n.name, n.cpus.housekeeping.kernel(), n.cpus.compute.kernel(), n.cpus.irq_affinity)
        for n in nodes
    ]
    return [
        "CPU sets (housekeeping: IRQs, exporters; compute: inference)",
        *table(rows, ("node", "housekeeping", "compute", "irq mask")),
    ]


def _targets(plan: Plan) -> list[str]:
    targets = plan.monitoring.targets
    rows = [(t.job, t.node, t.target) for t in targets]
    title = (
        f"Monitoring: {len(targets)} scrape targets,"
        f" Prometheus and Grafana on {plan.monitoring.prometheus_node}"
    )
    return [title, *table(rows, ("job", "node", "target"))]


def _serving(plan: Plan) -> list[str]:
    serving = plan.serving
    lines = [
        f"Serving: {serving.image} ({serving.image_source}) on {serving.api_node}:{serving.port}"
    ]
    if serving.engine_build is not None:
        build = serving.engine_build
        lines.append(f"  built on the head from {build.base}: vLLM {build.vllm}, Ray {build.ray}")
    lines += [f"  {note}" for note in serving.hardware_notes]
    # Quoted as a shell reads it: a person pastes this line, and a stack's text is in it.
    return [*lines, "  " + shlex.join(vllm_command(plan))]


def _performance(perf: PerfEstimate) -> list[str]:
    rows = [
        (
            "expected",
            f"{perf.decode_tok_s_expected:.1f} tok/s",
            f"range {perf.decode_tok_s_low:.1f}-{perf.decode_tok_s_high:.1f}"
            f" (the fit's leave-one-out error{', widened' if perf.outside_calibration else ''})",
        ),
        ("ceiling", f"{perf.decode_tok_s_ceiling:.1f} tok/s", "reads at full bandwidth"),
        ("dominated by", ", ".join(perf.dominant_terms), "of the token time"),
        (
            "read per token",
            decimal_bytes(perf.read_bytes_per_token_per_gpu),
            "per GPU (per node on GB10)",
        ),
        (
            "weights + KV",
            f"{perf.memory_ms:.2f} ms",
            f"at {perf.memory_bandwidth_gb_s:g} GB/s x efficiency {perf.decode_efficiency:.2f}"
            f" ({perf.engine}, {perf.weight_format}, {perf.hardware_class})",
        ),
        ("  of it KV cache", f"{perf.kv_ms:.2f} ms", f"at {perf.inputs.context_tokens} tokens"),
        ("compute", f"{perf.compute_ms:.2f} ms", _compute_basis(perf)),
        ("per-layer overhead", f"{perf.layer_ms:.2f} ms", f"{perf.inputs.layers} layers"),
        (
            "all-reduces",
            f"{perf.allreduce_ms:.2f} ms",
            f"{perf.allreduces_per_token} per token x {perf.allreduce_us:g} us"
            f" ({perf.inputs.interconnect})",
        ),
        (
            "pipeline hops",
            f"{perf.pp_ms:.2f} ms",
            f"{perf.pp_hops_per_token} x {perf.pp_hop_us:g} us",
        ),
        ("fabric share", f"{perf.fabric_share:.1%}", "of the expected token time"),
    ]
    if perf.speculative_gain != 1:
        rows.append(("speculative gain", f"x{perf.speculative_gain:.2f}", "on the token time"))
    lines = ["Single-stream decode estimate", *table(rows)]
    if perf.outside_calibration:
        lines.append("  outside the calibrated data:")
        lines += [f"    - {note}" for note in perf.outside_calibration]
    lines.append("  assumptions:")
    lines += [f"    - {note}" for note in perf.assumptions]
    return [*lines, f"  leans on calibration rows: {', '.join(perf.leans_on) or 'none'}"]


def _compute_basis(perf: PerfEstimate) -> str:
    if perf.tensor_tflops is None:
        return "no compute ceiling: the hardware profile names no tensor TFLOPS"
    reads = perf.memory_ms + perf.layer_ms
    hidden = "hidden under the reads" if perf.compute_ms <= reads else "COMPUTE-BOUND"
    return (
        f"{perf.inputs.flops_per_token / 1e9:.3g} GFLOP a token at {perf.tensor_tflops:g}"
        f" {perf.compute_precision} dense TFLOPS a GPU ({hidden})"
    )


def _concurrency(perf: PerfEstimate) -> list[str]:
    c = perf.concurrency
    fits = "fit" if c.fits else "DO NOT fit"
    lines = [
        f"Concurrent streams: {c.streams} at {c.context_tokens} tokens of context each",
        f"  {c.per_request_tok_s:.1f} tok/s per request, {c.aggregate_tok_s:.1f} tok/s together;"
        f" their KV caches {fits} ({c.kv_streams_fit} streams fit the tightest GPU,"
        f" {decimal_bytes(c.kv_bytes_per_stream)} each)",
    ]
    if c.shared_routing_aggregate_tok_s > c.aggregate_tok_s * 1.01:
        lines.append(
            f"  up to {c.shared_routing_aggregate_tok_s:.1f} tok/s together if the streams route"
            " to the same experts (one task's agents, one prompt sampled N times)"
        )
    if c.compute_ceiling_tok_s is not None:
        from_streams = (
            f"compute-bound from {c.compute_bound_streams} streams"
            if c.compute_bound_streams is not None
            else "no step compute-bound within the sweep"
        )
        ceiling = f"  compute ceiling {c.compute_ceiling_tok_s:.0f} tok/s together"
        lines.append(f"{ceiling}; {from_streams}")
    lines.append(
        f"  more streams stop paying past {c.knee_streams} ({c.knee_aggregate_tok_s:.0f} tok/s"
        f" together), bound by {c.knee_limit}: {c.knee_reason}"
    )
    rows = [
        (s.streams, f"{s.per_request_tok_s:.1f}", f"{s.aggregate_tok_s:.1f}", s.bound)
        for s in c.levels
    ]
    return lines + table(rows, ("streams", "tok/s per request", "tok/s together", "step bound by"))


def render_blast_radius(radius: BlastRadius) -> str:
    """What `up` would do to the deployed stack, in words, per node."""
    rows = [
        (
            node.node,
            ", ".join(node.restarts) or "-",
            ", ".join(node.starts) or "-",
            ", ".join(node.stops) or "-",
            decimal_bytes(node.weight_bytes) if node.weight_bytes else "-",
        )
        for node in radius.nodes
    ]
    changed = [
        f"  {what}: {was} -> {now}" if was != now else f"  {what}: {now} (unchanged)"
        for what, (was, now) in (("model", radius.model), ("image", radius.image))
    ]
    headers = ("node", "restarts", "starts", "stops", "weights moved in")
    return _sections(
        [f"sparkrack plan --against: stack {radius.stack}, deployed -> this stack file", *changed],
        ["engine containers, per node:", *table(rows, headers)],
        [f"serving: {serving_verdict(radius)}"],
    )


def serving_verdict(radius: BlastRadius) -> str:
    if not radius.serving_stops:
        return "continues; no engine container changes"
    last = (
        f"the last rollout was down {radius.last_downtime_s:g} s"
        if radius.last_downtime_s is not None
        else "no rollout measured yet"
    )
    return (
        f"stops: new weights and images move first while the old engine serves; then vLLM "
        f"drains (up to {radius.drain_timeout_s} s for the requests in flight) and restarts; "
        f"{last}"
    )
