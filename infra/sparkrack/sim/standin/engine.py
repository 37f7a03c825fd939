"""sparkrack's engine stand-in: NOT vLLM, a test double for its GPU work in the simulated cluster.

It takes `vllm serve MODEL` flags, refuses to start in a container given no GPU (cuda.py), joins
the Ray cluster that `ray start` formed (Ray is real), reserves one GPU bundle per rank as vLLM
does, stops when a rank's container has no GPU, has an actor on each rank's node report the NCCL
transport that node's env, RDMA devices, device nodes and memlock limit would give (nccl.py):
TCP sockets when RDMA is unusable, said only in the log, as real NCCL does. Then it serves the
OpenAI API with filler tokens at `--token-rate` per stream, exposes vllm:* metrics under their
real names, and stops when a rank dies, as vLLM's engine does.

Runs inside the stand-in image as a script (standard library + Ray); Ray is imported only where
the driver needs it, so the pure parts import and unit-test on a host without Ray.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
import warnings
from collections.abc import Sequence
from typing import Any

STANDIN_VERSION = "0.0.0+sparkrack.standin"
# vLLM waits up to 1800 s for a placement group; a simulated cluster is up in well under 300.
PLACEMENT_TIMEOUT_S = 300.0
PLACEMENT_LOG_EVERY_S = 10.0


if __package__:  # imported: the tests, and sparkrack on the host
    from sparkrack.sim.standin.api import StandinServer
    from sparkrack.sim.standin.cuda import no_gpu_refusal
    from sparkrack.sim.standin.nccl import (
        SYSFS_INFINIBAND,
        NodeReport,
        inspect_node,
        ipv4_interfaces,
        memlock_limit,
    )
    from sparkrack.sim.standin.reach import Endpoint, Hca, Listeners, hcas_of, misses, rank_pairs
    from sparkrack.sim.standin.serve_args import (
        BANNER,
        ServeArgs,
        StandinError,
        log,
        parse_args,
        pp_layer_partition,
    )
else:  # run as a script in the stand-in image, where its other files lie beside it
    from api import StandinServer  # type: ignore[import-not-found,no-redef]
    from cuda import no_gpu_refusal  # type: ignore[import-not-found,no-redef]
    from nccl import (  # type: ignore[import-not-found,no-redef]
        SYSFS_INFINIBAND,
        NodeReport,
        inspect_node,
        ipv4_interfaces,
        memlock_limit,
    )
    from reach import (  # type: ignore[import-not-found,no-redef]
        Endpoint,
        Hca,
        Listeners,
        hcas_of,
        misses,
        rank_pairs,
    )
    from serve_args import (  # type: ignore[import-not-found,no-redef]
        BANNER,
        ServeArgs,
        StandinError,
        log,
        parse_args,
        pp_layer_partition,
    )


class NodeInspector:
    """One per placement-group bundle: holds that GPU, as a vLLM worker does, and reports."""

    def __init__(self, rank: int) -> None:
        self.rank = rank
        self.hcas: list[Hca] = []
        self.listeners: Listeners | None = None

    def report(self) -> NodeReport:
        import ray

        gpus = ray.get_gpu_ids()
        address = ray.util.get_node_ip_address()
        device = int(gpus[0]) if gpus else 0
        interfaces = ipv4_interfaces()
        report = inspect_node(
            self.rank,
            address,
            device,
            os.environ,
            SYSFS_INFINIBAND,
            interfaces,
            memlock=memlock_limit(),
        )
        taken = [(port.device, port.netdev) for port in report.transport.ib_ports]
        self.hcas = hcas_of(taken, interfaces)
        return report

    def listen(self) -> list[Endpoint]:
        """A listener on each HCA NCCL took, for the peers' probes; held as long as the actor."""
        self.listeners = Listeners(self.hcas)
        return self.listeners.endpoints

    def reach(self, peer: list[Endpoint]) -> list[str]:
        """NCCL's warning for each HCA pair to `peer` that does not connect; [] when it does."""
        return [miss.nccl_line() for miss in misses(self.hcas, peer, os.environ)]

    def stop_listening(self) -> None:
        if self.listeners is not None:
            self.listeners.close()

    def gpu_refusal(self) -> str | None:
        """What CUDA says in this rank's container when it was given no GPU; None when it was."""
        return no_gpu_refusal()

    def alive(self) -> int:
        return self.rank


# --- the Ray driver -------------------------------------------------------------------------


def reserve_gpus(args: ServeArgs) -> list[Any]:
    """Join the Ray cluster, take one GPU bundle per rank, start an inspector on each and log
    what they report. Returns the actor handles: they must live as long as the server."""
    import ray

    # Ray's advice about a future default concerns zero-GPU tasks; the stand-in has none.
    warnings.filterwarnings("ignore", category=FutureWarning, module="ray")
    ray.init(address="auto", logging_level=logging.WARNING)
    group = wait_for_placement_group(args.world_size)
    actors = start_inspectors(group, args.world_size)
    reports = ray.get([actor.report.remote() for actor in actors])
    for report in reports:
        for line in report.log_lines():
            print(line, flush=True)
    no_gpu = ray.get([actor.gpu_refusal.remote() for actor in actors])
    refusals = gpu_refusals_of(reports, no_gpu) + refusals_of(reports, args.world_size)
    refusals = refusals or unreachable_pairs(actors, reports, args)
    if refusals:
        raise StandinError("\n".join(refusals))
    return actors


def unreachable_pairs(
    actors: list[Any], reports: Sequence[NodeReport], args: ServeArgs
) -> list[str]:
    """Probe every rank pair NCCL connects over the HCAs it took (reach.py); log NCCL's warning
    under the rank that tried, and return one refusal per pair that does not connect."""
    import ray

    endpoints = ray.get([actor.listen.remote() for actor in actors])
    pairs = rank_pairs(args.tensor_parallel_size, args.pipeline_parallel_size)
    pairs = [(a, b) for a, b in pairs if endpoints[a] and endpoints[b]]  # both on RDMA
    answers = ray.get([actors[a].reach.remote(endpoints[b]) for a, b in pairs])
    ray.get([actor.stop_listening.remote() for actor in actors])
    refusals = []
    for (a, b), lines in zip(pairs, answers, strict=True):
        for line in lines:
            print(f"{reports[a].prefix} NCCL WARN {line}", flush=True)
        if not lines:
            print(f"stand-in: ranks {a} and {b}: their HCAs reach each other", flush=True)
        else:
            refusals.append(
                f"rank {a} ({reports[a].host}) and rank {b} ({reports[b].host}): no RDMA path "
                f"between their HCAs ({len(lines)} of their pairs timed out); NCCL error: "
                "unhandled system error"
            )
    return refusals


# vLLM's engine dies with any of its ranks; the stand-in asks its ranks this often.
RANK_CHECK_EVERY_S = 10.0
RANK_ANSWER_TIMEOUT_S = 60.0  # a slow answer (a loaded node) is not a death


def watch_ranks(actors: list[Any]) -> None:
    """vLLM's engine dies with any of its ranks (EngineDeadError) and its API server exits; the
    unit's restart policy then starts a whole engine, which waits for every rank again and
    re-reads the transport. The stand-in does the same when a rank's actor is gone (its node's
    Ray stopped, its container replaced)."""
    import ray
    from ray.exceptions import GetTimeoutError, RayError

    transient = getattr(ray.exceptions, "ActorUnavailableError", GetTimeoutError)
    while True:
        time.sleep(RANK_CHECK_EVERY_S)
        try:
            ray.get([actor.alive.remote() for actor in actors], timeout=RANK_ANSWER_TIMEOUT_S)
        except (GetTimeoutError, transient):
            continue
        except RayError as error:
            first = (str(error).strip().splitlines() or [type(error).__name__])[0]
            log("ERROR", f"a rank of the engine died ({first}): the engine stops, as vLLM's does")
            os._exit(1)  # no Ray shutdown: its GCS calls may hang on the dead rank


def gpu_refusals_of(reports: Sequence[NodeReport], no_gpu: Sequence[str | None]) -> list[str]:
    """A rank whose container has no GPU stops the engine, as vLLM's worker does at CUDA init."""
    return [
        f"rank {r.rank} ({r.host}): {refusal}"
        for r, refusal in zip(reports, no_gpu, strict=True)
        if refusal
    ]


def refusals_of(reports: Sequence[NodeReport], world_size: int) -> list[str]:
    """Every rank's refusal, except a lone GPU on a machine without RDMA devices: vLLM sets up no
    NCCL network for a world of one, so there is no transport to get wrong."""
    return [
        f"rank {r.rank} ({r.host}): {r.transport.refusal}"
        for r in reports
        if r.transport.refusal and (world_size > 1 or r.ports)
    ]


def wait_for_placement_group(world_size: int) -> Any:
    """vLLM's layout: one {"GPU": 1} bundle per rank, strategy PACK, the first bundle pinned to
    the driver's node. With one GPU per GB10, PACK still puts each rank on its own node."""
    import ray
    from ray.util.placement_group import placement_group

    driver_node = f"node:{ray.util.get_node_ip_address()}"
    bundles: list[dict[str, float]] = [{"GPU": 1.0} for _ in range(world_size)]
    bundles[0][driver_node] = 0.001
    available = ray.cluster_resources().get("GPU", 0)
    if world_size > available:
        needs = f"{world_size} GPUs needed (TP x PP), the Ray cluster has {available:g}"
        log("WARNING", f"{needs}: waiting for nodes to join")
    group = placement_group(bundles, strategy="PACK")
    started = time.monotonic()
    while not ray.wait([group.ready()], timeout=PLACEMENT_LOG_EVERY_S)[0]:
        waited = time.monotonic() - started
        available = ray.cluster_resources().get("GPU", 0)
        if waited >= PLACEMENT_TIMEOUT_S:
            raise StandinError(
                f"Cannot provide a placement group of {world_size} GPU bundles within "
                f"{waited:.0f} seconds: {world_size} GPUs needed (tensor x pipeline parallel), "
                f"the Ray cluster has {available:g}. See `ray status` and `ray list nodes`, and "
                "check that the driver's address is the one the Ray head was started with."
            )
        log("INFO", f"waited {waited:.0f}s for {world_size} GPU bundles; Ray has {available:g}")
    return group


def start_inspectors(group: Any, world_size: int) -> list[Any]:
    import ray
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    inspector = ray.remote(NodeInspector)
    actors = []
    for rank in range(world_size):
        strategy = PlacementGroupSchedulingStrategy(
            placement_group=group, placement_group_bundle_index=rank
        )
        options = {"num_gpus": 1, "num_cpus": 0, "scheduling_strategy": strategy}
        actors.append(inspector.options(**options).remote(rank))
    return actors


# --- entry point ----------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = parse_args(sys.argv[1:] if argv is None else argv)
        log("INFO", BANNER)
        # vLLM's own first line, which sparkrack's RDMA collector starts a new verdict on
        log("INFO", f"vLLM API server version {STANDIN_VERSION} (the stand-in's)")
        log("INFO", f"model {args.model}: {layout(args)}")
        check_layer_partition(args, os.environ.get("VLLM_PP_LAYER_PARTITION"))
        refusal = no_gpu_refusal()  # the API server's own platform check, before any rank
        if refusal:
            raise StandinError(refusal)
        actors = reserve_gpus(args)
    except StandinError as error:
        log("ERROR", f"sparkrack engine stand-in refuses to start: {error}")
        return 1
    serve(args, actors)
    return 0


def layout(args: ServeArgs) -> str:
    tp, pp = args.tensor_parallel_size, args.pipeline_parallel_size
    return f"TP {tp} x PP {pp} = {args.world_size} GPUs, {args.token_rate:g} tok/s per stream"


def check_layer_partition(args: ServeArgs, partition: str | None) -> None:
    layers = args.hf_overrides.get("num_hidden_layers")
    known = layers if isinstance(layers, int) else None
    stages = pp_layer_partition(partition, args.pipeline_parallel_size, known)
    if stages:
        log("INFO", f"VLLM_PP_LAYER_PARTITION: layers per stage {stages}")


def serve(args: ServeArgs, actors: list[Any]) -> None:
    address = (args.host or "0.0.0.0", args.port)
    server = StandinServer(address, args, os.environ.get("VLLM_API_KEY"))
    # As PID 1 of a container, SIGTERM's default action is to be ignored: `podman stop` would
    # wait out its timeout. It starts vLLM's shutdown instead, off the serving thread.
    stopping = threading.Thread(target=shut_down, args=(server, args.shutdown_timeout))
    signal.signal(signal.SIGTERM, lambda *_: None if stopping.ident else stopping.start())
    log("INFO", f"stand-in OpenAI API on http://{address[0]}:{address[1]} ({len(actors)} ranks)")
    if actors:
        threading.Thread(target=watch_ranks, args=(actors,), daemon=True).start()
    server.serve_forever()
    stopping.join()


def shut_down(server: StandinServer, timeout_s: int) -> None:
    """What vLLM logs and does on SIGTERM with --shutdown-timeout."""
    waiting = server.answering
    log("INFO", f"shutting down: {waiting} requests in flight, waiting up to {timeout_s}s")
    left = server.drain(timeout_s)
    log("INFO", f"shutdown: {left} requests cut off" if left else "shutdown: drained")


if __name__ == "__main__":
    sys.exit(main())
