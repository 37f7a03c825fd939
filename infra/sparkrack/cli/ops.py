"""The `bench`, `cost` and `doctor` subcommands: options, and the glue from a stack to a report.

Each `add_*` registers one subcommand on the main CLI (see `sparkrack.cli.COMMANDS`). A failure
that is not a bad stack (an endpoint that does not answer, a node that refuses SSH) prints one
line naming the stack and exits 2, as a refused stack does.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from sparkrack.cli.options import guarded, positive_int, progress_printer
from sparkrack.config.load import load_stack_file, stack_path
from sparkrack.config.secrets import api_key_of
from sparkrack.ops.bench.measure import BenchSettings, Prediction, request_for, run_bench
from sparkrack.ops.bench.openai_stream import Endpoint, EndpointError
from sparkrack.ops.bench.report import render_bench
from sparkrack.ops.bench.store import StoreError, latest, result_stem, results_dir, save
from sparkrack.ops.cost import inputs as cost_inputs
from sparkrack.ops.cost.arithmetic import CostError, load_prices, parse_window
from sparkrack.ops.cost.prometheus import PrometheusError
from sparkrack.ops.cost.report import Hardware, Tariff, cost_report, render_cost
from sparkrack.ops.doctor.cables import cable_summary, wiring
from sparkrack.ops.doctor.gather import gather_rack
from sparkrack.ops.doctor.judge import findings_for
from sparkrack.ops.doctor.report import failed, render_doctor
from sparkrack.plan import Plan, make_plan
from sparkrack.text.addresses import http_url
from sparkrack.transport.ssh import close_all
from sparkrack.transport.target import SshError

Subparsers = Any
OpsErrors = (EndpointError, StoreError, CostError, PrometheusError, SshError)


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a positive number, not {text!r}")
    return value


def share(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"expected a fraction from 0 to 1, not {text!r}")
    return value


def stream_counts(text: str) -> tuple[int, ...]:
    try:
        counts = tuple(positive_int(part.strip()) for part in text.split(","))
    except argparse.ArgumentTypeError:
        message = f"expected stream counts such as 1,2,4,8, not {text!r}"
        raise argparse.ArgumentTypeError(message) from None
    return counts


# --- bench ------------------------------------------------------------------------------------


def add_bench(commands: Subparsers, stack_options: argparse.ArgumentParser) -> None:
    command = commands.add_parser(
        "bench",
        parents=[stack_options],
        help="measure the deployed endpoint: cold, single stream, concurrency",
        description="Measure the stack's OpenAI-compatible endpoint as seed 001 did: warm-up"
        " requests reported apart as cold, one stream N times (decode tok/s = 1/TPOT,"
        " end-to-end tok/s, TTFT; min/median/max), then concurrent streams; the estimate beside"
        " the measurement. Writes <time>.json and <time>.png per run.",
    )
    command.add_argument(
        "--endpoint", help="base URL (default: http://<head node address>:<serving port>)"
    )
    command.add_argument("--model", help="model name to request (default: the served name)")
    command.add_argument(
        "--prompt-tokens", type=positive_int, default=512, help="about N words (default 512)"
    )
    command.add_argument(
        "--max-tokens",
        type=positive_int,
        default=256,
        help="tokens generated per request (default 256)",
    )
    command.add_argument(
        "--repetitions", type=positive_int, default=5, help="single-stream runs (default 5)"
    )
    command.add_argument(
        "--warmups", type=positive_int, default=1, help="cold runs, reported apart (default 1)"
    )
    command.add_argument(
        "--concurrency", type=stream_counts, default=(1, 2, 4, 8),
        help="stream counts of the sweep, comma-separated (default 1,2,4,8)",
    )  # fmt: skip
    command.add_argument("--json", action="store_true", help="print the result as JSON")
    command.add_argument(
        "--out", type=Path, help="results directory (default ~/.local/share/sparkrack/bench/STACK)"
    )
    command.add_argument(
        "--compare", action="store_true", help="show the change since the last stored run"
    )
    command.set_defaults(run=run_bench_command)


def run_bench_command(args: argparse.Namespace) -> int:
    return guarded(f"sparkrack bench: stack {args.stack}", OpsErrors, lambda: bench(args))


def bench(args: argparse.Namespace) -> int:
    plan = make_plan(load_stack_file(args.stack, args.stacks_dir))
    project = stack_path(args.stack, args.stacks_dir).parent.parent  # its Pulumi.yaml's
    key = api_key_of(args.stack, project) if plan.serving.api_key_secret else None
    endpoint = Endpoint(args.endpoint or default_endpoint(plan), key)
    model = args.model or plan.serving.served_model_name
    served = endpoint.models()
    if model not in served:
        raise EndpointError(
            f"{endpoint.url} serves {', '.join(served) or 'nothing'}, not {model!r}: pass --model"
        )
    settings = BenchSettings(
        stack=plan.stack, endpoint=endpoint.url, model=model,
        prompt_tokens=args.prompt_tokens, max_tokens=args.max_tokens,
        repetitions=args.repetitions, warmups=args.warmups, concurrency=args.concurrency,
    )  # fmt: skip
    directory = results_dir(plan.stack, args.out)
    previous = latest(directory, plan.stack) if args.compare and directory.is_dir() else None
    progress = progress_printer()
    result = run_bench(
        settings, Prediction.of(plan.performance), request_for(endpoint, settings), progress
    )
    stored = save(result, directory)
    plot = write_plot_beside(result, directory)
    progress(f"wrote {stored} and {plot}")
    print(result.model_dump_json(indent=2) if args.json else render_bench(result, previous))
    return 0


def write_plot_beside(result: Any, directory: Path) -> Path:
    from sparkrack.ops.bench.plot import write_plot  # matplotlib only when a plot is drawn

    return write_plot(result, directory / f"{result_stem(result)}.png")


def default_endpoint(plan: Plan) -> str:
    return http_url(plan.node(plan.serving.api_node).address, plan.serving.port, "")


# --- cost -------------------------------------------------------------------------------------


def add_cost(commands: Subparsers, stack_options: argparse.ArgumentParser) -> None:
    command = commands.add_parser(
        "cost",
        parents=[stack_options],
        help="energy cost per day against API prices, break-even and payback",
        description="Local running cost against API prices. Power per node comes from the"
        " hardware profile (assumed: a GB10 has no wall-power sensor) or, with --prometheus, from"
        " the GPU exporter (measured, GPU board only). A payback time is printed only when the"
        " hardware amortises within --years at this traffic; otherwise the command says so.",
    )
    command.add_argument(
        "--tariff", type=positive_float, required=True, help="price of 1 kWh, e.g. 1.04"
    )
    command.add_argument("--currency", required=True, help="the tariff's currency, e.g. zł")
    traffic = command.add_mutually_exclusive_group(required=True)
    traffic.add_argument(
        "--tokens-per-day", type=positive_float, help="tokens a day, input and output together"
    )
    traffic.add_argument(
        "--prometheus", help="Prometheus URL: read vLLM's token counters and GPU power"
    )
    command.add_argument(
        "--input-share", type=share, default=0.9,
        help="with --tokens-per-day: the input (prompt) fraction, 0-1 (default 0.9)",
    )  # fmt: skip
    command.add_argument(
        "--window", default="24h", help="with --prometheus: the window, e.g. 24h, 7d"
    )
    command.add_argument(
        "--prices", type=Path, help="API price YAML (default: shipped example table)"
    )
    command.add_argument(
        "--exchange-rate", type=positive_float,
        help="units of --currency per unit of the price table's currency (default: the table's)",
    )  # fmt: skip
    command.add_argument(
        "--node-watts",
        type=positive_float,
        help="assumed wall power per node (default: the profile's)",
    )
    command.add_argument(
        "--hardware-cost", type=positive_float, help="what the rack cost, in --currency"
    )
    command.add_argument(
        "--years", type=positive_float, default=3.0, help="amortisation period (default 3)"
    )
    command.add_argument(
        "--bench-dir",
        type=Path,
        help="bench results for capacity (default: where bench stores them)",
    )
    command.add_argument("--json", action="store_true", help="print the figures as JSON")
    command.set_defaults(run=run_cost_command)


def run_cost_command(args: argparse.Namespace) -> int:
    return guarded(f"sparkrack cost: stack {args.stack}", OpsErrors, lambda: cost(args))


def cost(args: argparse.Namespace) -> int:
    spec = load_stack_file(args.stack, args.stacks_dir)
    plan = make_plan(spec)
    prices = load_prices(args.prices)
    power = cost_inputs.assumed_power(spec, args.node_watts)
    if args.prometheus:
        window_s = parse_window(args.window)
        power = cost_inputs.measured_power(args.prometheus, args.window, spec, power)
        traffic = cost_inputs.prometheus_traffic(args.prometheus, args.window, window_s)
    else:
        traffic = cost_inputs.declared_traffic(args.tokens_per_day, args.input_share)
    report = cost_report(
        stack=spec.stack,
        tariff=Tariff(per_kwh=args.tariff, currency=args.currency),
        power=power,
        traffic=traffic,
        prices=prices,
        exchange_rate=prices.rate_to(args.currency, args.exchange_rate),
        hardware=Hardware(cost=args.hardware_cost, years=args.years)
        if args.hardware_cost
        else None,
        capacity=cost_inputs.capacity_tok_s(plan, results_dir(spec.stack, args.bench_dir)),
    )
    print(report.model_dump_json(indent=2) if args.json else render_cost(report))
    return 0


# --- doctor -----------------------------------------------------------------------------------


def add_doctor(commands: Subparsers, stack_options: argparse.ArgumentParser) -> None:
    command = commands.add_parser(
        "doctor",
        parents=[stack_options],
        help="read-only readiness report of every node and cable (exit 1 when something is wrong)",
        description="Over SSH, read-only, no Pulumi state: per node the OS, ConnectX-7 ports"
        " (carrier, speed, MTU), RDMA devices, the service user's memlock and NCCL_IB_DISABLE"
        " wherever it would be inherited; per cable a jumbo ping (when both ends have addresses)"
        " and a link-level probe that finds crossed or swapped cables and prints the corrected"
        " map. A port that is down is raised for the probe only and put back down.",
    )
    command.add_argument("--json", action="store_true", help="print the findings as JSON")
    command.set_defaults(run=run_doctor_command)


def run_doctor_command(args: argparse.Namespace) -> int:
    try:
        return guarded(f"sparkrack doctor: stack {args.stack}", OpsErrors, lambda: doctor(args))
    finally:
        close_all()


def doctor(args: argparse.Namespace) -> int:
    spec = load_stack_file(args.stack, args.stacks_dir)
    plan = make_plan(spec)
    wires = wiring(spec)
    reading = gather_rack(plan)
    findings = findings_for(plan, wires, reading)
    summary = cable_summary(wires, reading)
    if args.json:
        rows = [vars(f) for f in findings]
        print(json.dumps({"stack": plan.stack, "findings": rows, "cable_map": summary}, indent=2))
    else:
        print(render_doctor(plan.stack, findings, summary))
    return 1 if failed(findings) else 0
