"""What the dashboard shows: every panel's PromQL, unit and explanation, from the Plan.

Pure data, so the queries can be read and tested without Grafana; `grafana.py` turns them into
the dashboard. Every query filters on `node=~"$node"` (Prometheus attaches `node` to every
target) and uses `$__rate_interval` so a rate always spans several scrapes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from sparkrack.plan import Plan
from sparkrack.text.cpus import CpuList

NODE = 'node=~"$node"'
RATE = "$__rate_interval"
HOURS_PER_DAY = 24
THROUGHPUT_TITLE = "Throughput (tok/s)"


@dataclass(frozen=True)
class Query:
    expr: str
    legend: str = ""


@dataclass(frozen=True)
class PanelDef:
    title: str
    unit: str
    queries: tuple[Query, ...]
    kind: Literal["timeseries", "stat"] = "timeseries"
    description: str = ""
    idle: bool = False  # NaN or no value means "no requests in the window", shown as "idle"
    mappings: dict[str, str] = field(default_factory=dict)
    minimum: float | None = None
    width: int = 12
    height: int = 8


Row = tuple[str, tuple[PanelDef, ...]]


def dashboard_rows(plan: Plan) -> list[Row]:
    """The rows in order; the first is the overview, the only one open."""
    return [
        ("Overview", overview(plan)),
        ("vLLM", vllm_panels()),
        ("Fabric (RDMA)", fabric_panels()),
        ("GPU", gpu_panels(plan)),
        ("CPU and system", system_panels(plan)),
        ("Containers", container_panels()),
        ("Energy and cost", energy_panels(plan)),
    ]


def rate(metric: str, selector: str = NODE) -> str:
    return f"rate({metric}{{{selector}}}[{RATE}])"


def quantile(q: float, histogram: str) -> str:
    return f"histogram_quantile({q:g}, sum by (le) ({rate(histogram + '_bucket')}))"


def throughput() -> PanelDef:
    generated = f"sum({rate('vllm:generation_tokens_total')})"
    decode_time = f"sum({rate('vllm:inter_token_latency_seconds_sum')})"
    decode_tokens = f"sum({rate('vllm:inter_token_latency_seconds_count')})"
    return PanelDef(
        title=THROUGHPUT_TITLE,
        unit="short",
        queries=(
            Query(generated, "end-to-end"),
            # `> 0` leaves the line empty, not NaN, when no token was decoded in the window.
            Query(f"{decode_tokens} / ({decode_time} > 0)", "inter-token (1/TPOT)"),
        ),
        description=(
            "Two lines that measure different things. End-to-end: generated tokens per second"
            " of wall-clock time, averaged over the window, so prefill, queueing and idle"
            " gaps pull it down. Inter-token: 1/TPOT, the decode loop alone with prefill"
            " excluded, so it reads higher (seed 001: 32.9 end-to-end against 57.1"
            " inter-token, with 40.4 tok/s single-stream in the benchmark). Neither"
            " contradicts the benchmark."
        ),
        minimum=0,
    )


def latency_stat(title: str, histogram: str, what: str) -> PanelDef:
    return PanelDef(
        title=title,
        unit="s",
        kind="stat",
        queries=(
            Query(quantile(0.5, histogram), "p50"),
            Query(quantile(0.95, histogram), "p95"),
        ),
        description=(
            f"{what}. Quantiles over a window without requests are NaN: shown as idle, not as"
            " an outage. Check the request rate before hunting for one."
        ),
        idle=True,
        width=6,
        height=5,
    )


def ttft() -> PanelDef:
    return latency_stat(
        "TTFT p50 / p95",
        "vllm:time_to_first_token_seconds",
        "Time to first token: queueing plus prefill",
    )


def tpot() -> PanelDef:
    return latency_stat(
        "TPOT p50 / p95",
        "vllm:inter_token_latency_seconds",
        "Time per output token: the decode loop alone",
    )


def kv_cache() -> PanelDef:
    return PanelDef(
        title="KV cache use",
        unit="percentunit",
        queries=(Query(f"vllm:kv_cache_usage_perc{{{NODE}}}", "{{node}}"),),
        description="Share of vLLM's KV cache blocks in use (1 = full: requests queue).",
        minimum=0,
        width=6,
        height=5,
    )


def overview(plan: Plan) -> tuple[PanelDef, ...]:
    return (
        throughput(),
        PanelDef(
            title="Requests",
            unit="short",
            queries=(
                Query(f"sum(vllm:num_requests_running{{{NODE}}})", "running"),
                Query(f"sum(vllm:num_requests_waiting{{{NODE}}})", "waiting"),
            ),
            minimum=0,
        ),
        ttft(),
        tpot(),
        kv_cache(),
        PanelDef(
            title="Targets up",
            unit="short",
            kind="stat",
            queries=(Query(f"sum by (job) (up{{{NODE}}})", "{{job}}"),),
            description=f"Scrape targets answering, by job: {len(plan.monitoring.targets)}"
            " planned in all.",
            width=6,
            height=5,
        ),
    )


def vllm_panels() -> tuple[PanelDef, ...]:
    latency = (
        ("TTFT", "vllm:time_to_first_token_seconds"),
        ("TPOT", "vllm:inter_token_latency_seconds"),
        ("end-to-end", "vllm:e2e_request_latency_seconds"),
    )
    return (
        PanelDef(
            title="Latency p50 / p95 over time",
            unit="s",
            queries=tuple(
                Query(quantile(q, metric), f"{name} p{round(q * 100)}")
                for name, metric in latency
                for q in (0.5, 0.95)
            ),
            description="NaN (a gap) while idle: no requests finished in the window.",
            idle=True,
            width=24,
        ),
        PanelDef(
            title="Tokens per second",
            unit="short",
            queries=(
                Query(f"sum({rate('vllm:prompt_tokens_total')})", "prompt (prefill)"),
                Query(f"sum({rate('vllm:generation_tokens_total')})", "generated (decode)"),
            ),
            minimum=0,
        ),
        PanelDef(
            title="KV cache use over time",
            unit="percentunit",
            queries=(Query(f"vllm:kv_cache_usage_perc{{{NODE}}}", "{{node}}"),),
            minimum=0,
        ),
    )


def fabric_panels() -> tuple[PanelDef, ...]:
    legend = "{{node}} {{device}} port {{port}}"
    return (
        PanelDef(
            title="RDMA Gb/s per port",
            unit="Gbits",
            queries=(
                Query(f"{rate('sparkrack_rdma_port_xmit_bytes_total')} * 8 / 1e9", f"{legend} tx"),
                Query(f"{rate('sparkrack_rdma_port_rcv_bytes_total')} * 8 / 1e9", f"{legend} rx"),
            ),
            description=(
                "RoCE bypasses the kernel network stack, so node_network_* never sees it (seed"
                " 001: netdev 120 KB against 1.46 GB on the port counter). These come from"
                " /sys/class/infiniband/*/ports/*/counters/port_{xmit,rcv}_data, which count"
                " 4-byte words; the collector has already multiplied by 4."
            ),
            minimum=0,
        ),
        PanelDef(
            title="RDMA port state",
            unit="short",
            kind="stat",
            queries=(Query(f"sparkrack_rdma_port_up{{{NODE}}}", legend),),
            mappings={"1": "ACTIVE", "0": "DOWN"},
        ),
    )


def gpu_panels(plan: Plan) -> tuple[PanelDef, ...]:
    return (
        PanelDef(
            title="GPU utilisation",
            unit="percentunit",
            queries=(Query(f"nvidia_smi_utilization_gpu_ratio{{{NODE}}}", "{{node}}"),),
            minimum=0,
        ),
        PanelDef(
            title="GPU power",
            unit="watt",
            queries=(Query(f"nvidia_smi_power_draw_watts{{{NODE}}}", "{{node}}"),),
            description="Board power from nvidia-smi: below what the node draws at the wall.",
            minimum=0,
        ),
        gpu_memory(plan),
        PanelDef(
            title="GPU temperature",
            unit="celsius",
            queries=(Query(f"nvidia_smi_temperature_gpu{{{NODE}}}", "{{node}}"),),
            description="No fan panel: GB10 has no tachometer and nvidia-smi reports fan.speed"
            " as [N/A] (seed 001).",
        ),
    )


def gpu_memory(plan: Plan) -> PanelDef:
    if plan.monitoring.gpu_memory_from == "meminfo":
        used = f"node_memory_MemTotal_bytes{{{NODE}}} - node_memory_MemAvailable_bytes{{{NODE}}}"
        total = f"node_memory_MemTotal_bytes{{{NODE}}}"
        note = (
            "Unified memory: the GPU and the CPU share it, and nvidia-smi's memory fields read"
            " [N/A], so this is /proc/meminfo (MemTotal - MemAvailable) via node-exporter."
        )
    else:
        used = f"nvidia_smi_memory_used_bytes{{{NODE}}}"
        total = f"nvidia_smi_memory_total_bytes{{{NODE}}}"
        note = "Dedicated GPU memory as nvidia-smi reports it."
    return PanelDef(
        title="GPU memory",
        unit="bytes",
        queries=(Query(used, "{{node}} used"), Query(total, "{{node}} total")),
        description=note,
        minimum=0,
    )


def core_classes(plan: Plan) -> dict[tuple[str, CpuList], list[str]]:
    """(class name, CPUs) -> the nodes with exactly that set: overrides may differ by node."""
    classes: dict[tuple[str, CpuList], list[str]] = {}
    for node in plan.nodes:
        cpus = node.cpus
        named = (
            (("housekeeping", cpus.housekeeping), ("compute", cpus.compute))
            if cpus.pinning
            else (("all cores", cpus.housekeeping),)
        )
        for key in named:
            classes.setdefault(key, []).append(node.name)
    return classes


def cpu_regex(cpus: CpuList) -> str:
    return "|".join(str(cpu) for cpu in cpus)


def cpu_by_class(plan: Plan) -> PanelDef:
    queries = []
    for (name, cpus), nodes in core_classes(plan).items():
        selector = f'mode="idle", {NODE}, node=~"{"|".join(nodes)}", cpu=~"{cpu_regex(cpus)}"'
        queries.append(
            Query(
                f"1 - avg by (node) ({rate('node_cpu_seconds_total', selector)})",
                f"{{{{node}}}} {name}",
            )
        )
    return PanelDef(
        title="CPU busy by core class",
        unit="percentunit",
        queries=tuple(queries),
        description=(
            "Housekeeping cores (IRQs, exporters, sshd) against compute cores (inference), from"
            " the Plan's CPU sets. Busy compute cores with idle housekeeping ones are healthy;"
            " IRQs on compute cores took seed 000 from 20 tok/s to 4."
        ),
        minimum=0,
        width=24,
    )


def system_panels(plan: Plan) -> tuple[PanelDef, ...]:
    root = f'{NODE}, mountpoint="/"'
    return (
        cpu_by_class(plan),
        PanelDef(
            title="Load average (1 min)",
            unit="short",
            queries=(Query(f"node_load1{{{NODE}}}", "{{node}}"),),
        ),
        PanelDef(
            title="Root filesystem used",
            unit="percentunit",
            queries=(
                Query(
                    f"1 - node_filesystem_avail_bytes{{{root}}}"
                    f" / node_filesystem_size_bytes{{{root}}}",
                    "{{node}}",
                ),
            ),
            description='With --path.rootfs=/host node-exporter reports the root as "/".',
        ),
        PanelDef(
            title="Management network",
            unit="bps",
            queries=(
                Query(
                    f"sum by (node) ({rate('node_network_receive_bytes_total', NODE)}) * 8",
                    "{{node}} rx",
                ),
                Query(
                    f"sum by (node) ({rate('node_network_transmit_bytes_total', NODE)}) * 8",
                    "{{node}} tx",
                ),
            ),
            description="Kernel network stack only: RoCE traffic is in the Fabric row.",
        ),
        # Not a PSI panel: kernels without /proc/pressure (the simulator's hosts) leave the
        # pressure collector without series, and an empty panel is what the lint flags.
        PanelDef(
            title="Disk I/O",
            unit="Bps",
            queries=(
                Query(f"sum by (node) ({rate('node_disk_read_bytes_total')})", "{{node}} read"),
                Query(f"sum by (node) ({rate('node_disk_written_bytes_total')})", "{{node}} write"),
            ),
        ),
        PanelDef(
            title="node-exporter scrape time",
            unit="s",
            queries=(Query(f'scrape_duration_seconds{{job="node-exporter", {NODE}}}', "{{node}}"),),
            description=(
                f"Alert NodeExporterSlow above {plan.monitoring.alerts.node_exporter_slow_s:g} s."
                " Seed 001's hung collectors (infiniband, cpufreq) showed here first."
            ),
        ),
    )


def container_panels() -> tuple[PanelDef, ...]:
    return (
        PanelDef(
            title="Container CPU (top 10)",
            unit="short",
            queries=(
                Query(
                    f"topk(10, sum by (node, name) ({rate('container_cpu_usage_seconds_total')}))",
                    "{{node}} {{name}}",
                ),
            ),
            description="cAdvisor, from the service user's Podman; cores in use.",
        ),
        PanelDef(
            title="Container memory (top 10)",
            unit="bytes",
            queries=(
                Query(
                    f"topk(10, sum by (node, name) (container_memory_working_set_bytes{{{NODE}}}))",
                    "{{node}} {{name}}",
                ),
            ),
        ),
    )


def assumed_kwh_per_day(plan: Plan) -> str:
    """The hardware profiles' wall power for the selected nodes, as PromQL: one term per power
    figure, counting the selected nodes that have it."""
    by_watts: dict[float, list[str]] = {}
    for node, watts in plan.monitoring.assumed_power_watts.items():
        by_watts.setdefault(watts, []).append(node)
    terms = [
        f'count(up{{job="node-exporter", {NODE}, node=~"{"|".join(nodes)}"}}) * {watts:g}'
        for watts, nodes in by_watts.items()
    ]
    return f"({' + '.join(terms)}) * {HOURS_PER_DAY} / 1000"


def measured_kwh_per_day() -> str:
    return f"sum(avg_over_time(nvidia_smi_power_draw_watts{{{NODE}}}[1d])) * {HOURS_PER_DAY} / 1000"


def energy_panels(plan: Plan) -> tuple[PanelDef, ...]:
    energy = PanelDef(
        title="Energy per day",
        unit="kwatth",
        kind="stat",
        queries=(
            Query(assumed_kwh_per_day(plan), "assumed at the wall"),
            Query(measured_kwh_per_day(), "GPU board, measured"),
        ),
        description=(
            "Assumed: the hardware profile's wall power for each node, over 24 h (a GB10 has"
            " no wall-power sensor). Measured: nvidia-smi board power averaged over the last"
            " day, which leaves out the rest of the box."
        ),
    )
    tariff = plan.monitoring.tariff
    if tariff is None:
        return (energy,)
    cost = PanelDef(
        title=f"Energy cost per day ({tariff.currency})",
        unit=f"suffix: {tariff.currency}",
        kind="stat",
        queries=(
            Query(f"{assumed_kwh_per_day(plan)} * {tariff.per_kwh:g}", "assumed at the wall"),
            Query(f"{measured_kwh_per_day()} * {tariff.per_kwh:g}", "GPU board, measured"),
        ),
        description=f"Energy per day at the stack's tariff, {tariff.per_kwh:g}"
        f" {tariff.currency}/kWh. Running cost only: against API prices see `sparkrack cost`.",
    )
    return (energy, cost)
