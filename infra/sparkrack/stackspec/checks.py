"""Checks across fields (`cross_check`): names, references, ports, MTU, sizes, env."""

from __future__ import annotations

import ipaddress
from collections import Counter
from collections.abc import Iterator

from sparkrack.catalog import engine_flags
from sparkrack.stackspec.cluster import ClusterSpec
from sparkrack.stackspec.errors import Problem
from sparkrack.stackspec.fabric import FabricSpec
from sparkrack.stackspec.hardware import HardwareProfile
from sparkrack.stackspec.nodes import NodeSpec
from sparkrack.stackspec.secrets import HF_TOKEN_KEY, names_a_credential, set_secret
from sparkrack.stackspec.serving import is_pinned
from sparkrack.text.byte_units import gib


def cross_check(spec: ClusterSpec) -> list[Problem]:
    """Checks that need more than one field: names, references, ports, MTU, env."""
    problems = [*_node_problems(spec)]
    if problems:  # the checks below look nodes and profiles up
        return problems
    problems += _fabric_problems(spec)
    problems += _serving_problems(spec)
    problems += _mixed_simulation(spec)
    problems += _fabric_beside_management(spec)
    problems += _sizes_beyond_the_node(spec)
    problems += _takeover_problems(spec)
    return problems


def _takeover_problems(spec: ClusterSpec) -> Iterator[Problem]:
    """`takeover` names other stacks, each once: a stack's own nodes are already its own."""
    for i, other in enumerate(spec.takeover):
        if other == spec.stack:
            yield Problem(f"takeover[{i}]", f"{other} is this stack: name another stack")
        elif other in spec.takeover[:i]:
            yield Problem(f"takeover[{i}]", f"{other} is named twice")


def _sizes_beyond_the_node(spec: ClusterSpec) -> Iterator[Problem]:
    """Sizes bounded by what the node has: its GPU memory is all an engine container gets to
    use on GB10's unified memory, and per GPU on a server."""
    for i, node in enumerate(spec.nodes):
        profile = spec.hardware(node)
        override = node.overrides.gpu_memory
        if override is not None and override > profile.gpu_memory:
            yield Problem(
                f"nodes[{i}] ({node.name}).overrides.gpu_memory",
                f"{gib(override)} is more than {node.hardware}'s"
                f" {gib(profile.gpu_memory)} per GPU: an override only declares less",
                node.name,
            )
        memory = override or profile.gpu_memory
        for field in ("shm_size", "runtime_reserve_per_gpu"):
            size = getattr(spec.serving, field)
            if size >= memory:
                yield Problem(
                    f"serving.{field}",
                    f"{gib(size)} is not below the {gib(memory)} of GPU memory this node has",
                    node.name,
                )


def deploy_problems(spec: ClusterSpec) -> list[Problem]:
    """What a real rack needs before anything is deployed, beyond a stack that plans: the
    program refuses without it. `plan_problems` and `deploy_needs` split it for `sparkrack plan`."""
    return [*plan_problems(spec), *deploy_needs(spec)]


def plan_problems(spec: ClusterSpec) -> list[Problem]:
    """A real stack's mistakes that `sparkrack plan` refuses too: an engine or monitoring image
    not pinned, a flag its release lacks."""
    if _simulated(spec):
        return []
    return [*_unpinned_engine(spec), *_unpinned_monitoring(spec), *_flags_the_release_lacks(spec)]


def deploy_needs(spec: ClusterSpec) -> list[Problem]:
    """What only deploying needs: the weights' repository and commit. Planning (fit, split,
    speed, cost) works without them, so `sparkrack plan` warns and the program refuses."""
    return [] if _simulated(spec) else list(_real_model(spec))


def _simulated(spec: ClusterSpec) -> bool:
    return all(spec.hardware(n).simulated for n in spec.nodes)


def _flags_the_release_lacks(spec: ClusterSpec) -> Iterator[Problem]:
    """A flag in `serving.extra_args` the pinned vLLM release does not have would stop `vllm
    serve` at start, on the rack: said here, naming the release. Only a release the catalogue
    knows (catalog/engines/) can be checked; sparkrack's own flags are held to it by a test."""
    build = spec.serving.engine.build
    known = engine_flags(build.vllm) if build is not None else None
    if build is None or known is None:
        return
    for arg in spec.serving.extra_args:
        flag = arg.split("=", 1)[0]
        # A boolean field is also `--no-<name>` (argparse.BooleanOptionalAction in vLLM).
        base = f"--{flag.removeprefix('--no-')}" if flag.startswith("--no-") else flag
        if flag.startswith("--") and base not in known:
            found = f"vLLM {build.vllm} has no such flag (catalog/engines/vllm-{build.vllm}.yaml)"
            yield Problem("serving.extra_args", f"{flag}: {found}")


def _unpinned_engine(spec: ClusterSpec) -> Iterator[Problem]:
    """Flags and kernels change between vLLM releases (seed 001: the stock 0.13 did not know
    the model; a nightly calling itself 0.26.1 did): a real rack runs the release it names."""
    engine = spec.serving.engine
    if engine.accept_unpinned:
        return
    named = [("serving.engine.image", engine.image)]
    if engine.build is not None:
        named.append(("serving.engine.build.base", engine.build.base))
    escape = ", or set serving.engine.accept_unpinned: true"
    yield from _not_pinned(named, "a release tag", escape)


def _unpinned_monitoring(spec: ClusterSpec) -> Iterator[Problem]:
    """The exporters, Prometheus and Grafana as the engine: one build each, and with
    `image_source: build` the bases they are built on."""
    monitoring = spec.monitoring
    if not monitoring.enabled:
        return
    named = [
        ("monitoring.exporters_image", monitoring.exporters_image),
        ("monitoring.prometheus_image", monitoring.prometheus_image),
    ]
    if monitoring.grafana_image is not None:
        named.append(("monitoring.grafana_image", monitoring.grafana_image))
    if monitoring.image_source == "build":
        bases = spec.roles.monitoring
        named += [
            ("roles.monitoring.debian_image", bases.debian_image),
            ("roles.monitoring.golang_image", bases.golang_image),
        ]
    yield from _not_pinned(named, "a tag of one build")


def _not_pinned(named: list[tuple[str, str]], tag: str, escape: str = "") -> Iterator[Problem]:
    """Each (field, image reference) whose tag may move, named with what would pin it."""
    for field, reference in named:
        if not is_pinned(reference):
            yield Problem(
                field,
                f"{reference} is not pinned: name {tag} or a @sha256 digest (what runs must not"
                f" change under the stack){escape}",
            )


def _real_model(spec: ClusterSpec) -> Iterator[Problem]:
    """A real rack loads real weights: the repository and the commit, never a moving branch."""
    model = spec.model
    pin = f"`sparkrack model pin --stack {spec.stack}"
    if model.hf_repo is None:
        wanted = "model.hf_repo, model.revision" if model.revision is None else "model.hf_repo"
        yield Problem(
            wanted,
            f"{model.name} names no Hugging Face repository (the catalogue knows none) to load"
            f" its weights from: {pin} --repo ORG/NAME` writes it and its current commit",
        )
    elif model.revision is None:
        yield Problem(
            "model.revision",
            f"{model.name} names no commit of {model.hf_repo} (a branch such as main moves under"
            f" a running rack): {pin}` writes the current one",
        )


def _mixed_simulation(spec: ClusterSpec) -> Iterator[Problem]:
    simulated = sorted({n.hardware for n in spec.nodes if spec.hardware(n).simulated})
    real = sorted({n.hardware for n in spec.nodes if not spec.hardware(n).simulated})
    if simulated and real:
        yield Problem(
            "nodes",
            f"mixes simulated hardware ({', '.join(simulated)}) with real ({', '.join(real)}):"
            " a stack is all simulated (sparkrack sim) or all real",
        )


def _fabric_beside_management(spec: ClusterSpec) -> Iterator[Problem]:
    subnet = spec.fabric.subnet if spec.fabric else None
    if subnet is None:
        return
    for i, node in enumerate(spec.nodes):
        try:
            address = ipaddress.ip_address(node.address)
        except ValueError:
            continue  # a host name: its address is the resolver's
        if address in subnet:
            yield Problem(
                "fabric.subnet",
                f"{subnet} holds nodes[{i}] ({node.name})'s management address {address}: the"
                " fabric needs addresses of its own, apart from the management network",
                node.name,
            )
            return


def _duplicates(values: list[str]) -> set[str]:
    return {value for value, count in Counter(values).items() if count > 1}


def _node_problems(spec: ClusterSpec) -> Iterator[Problem]:
    names = _duplicates([node.name for node in spec.nodes])
    addresses = _duplicates([node.address for node in spec.nodes])
    known = ", ".join(sorted(spec.hardware_profiles))
    for i, node in enumerate(spec.nodes):
        where = f"nodes[{i}] ({node.name})"
        if node.name in names:
            yield Problem(f"{where}.name", f"duplicate node name {node.name!r}", node.name)
        if node.address in addresses:
            others = [n.name for n in spec.nodes if n.address == node.address and n is not node]
            yield Problem(
                f"{where}.address",
                f"address {node.address} is also used by {', '.join(others)}",
                node.name,
            )
        profile = spec.hardware_profiles.get(node.hardware)
        if profile is None:
            yield Problem(
                f"{where}.hardware",
                f"unknown hardware profile {node.hardware!r}; known: {known}",
                node.name,
            )
            continue
        yield from _override_problems(where, node, profile)


def _override_problems(where: str, node: NodeSpec, profile: HardwareProfile) -> Iterator[Problem]:
    cpu_sets = {
        "housekeeping_cpus": node.overrides.housekeeping_cpus,
        "compute_cpus": node.overrides.compute_cpus,
    }
    for field, cpus in cpu_sets.items():
        if cpus and max(cpus) >= profile.cpus.count:
            yield Problem(
                f"{where}.overrides.{field}",
                f"{cpus} names CPUs beyond the {profile.cpus.count} of {node.hardware}",
                node.name,
            )
    housekeeping, compute = cpu_sets.values()
    if housekeeping and compute and housekeeping.overlaps(compute):
        yield Problem(f"{where}.overrides", "housekeeping and compute CPUs overlap", node.name)


def _fabric_problems(spec: ClusterSpec) -> Iterator[Problem]:
    fabric = spec.fabric
    if fabric is None:
        if len(spec.nodes) > 1:
            yield Problem("fabric", f"{len(spec.nodes)} nodes need a fabric (cables or a switch)")
        return
    if endpoint_problems := list(_endpoint_problems(spec, fabric)):
        yield from endpoint_problems  # the checks below look the endpoints' ports up
        return
    yield from _mtu_problems(spec, fabric)


def _endpoint_problems(spec: ClusterSpec, fabric: FabricSpec) -> Iterator[Problem]:
    names = {node.name for node in spec.nodes}
    used: dict[tuple[str, str], str] = {}
    for path, endpoint in fabric.endpoints():
        if endpoint.node not in names:
            yield Problem(
                path, f"unknown node {endpoint.node!r}; nodes: {', '.join(sorted(names))}"
            )
            continue
        node = spec.node(endpoint.node)
        profile = spec.hardware(node)
        port_name = endpoint.port or (profile.ports[0].name if profile.ports else None)
        if port_name is None or profile.port(port_name) is None:
            ports = ", ".join(port.name for port in profile.ports) or "none"
            yield Problem(
                path,
                f"{node.hardware} has no port {port_name!r}; its ports: {ports}",
                node.name,
            )
            continue
        if (node.name, port_name) in used:
            yield Problem(
                path,
                f"{node.name}:{port_name} is already plugged at {used[node.name, port_name]}",
                node.name,
            )
        used[node.name, port_name] = path
    for i, cable in enumerate(fabric.cables):
        if cable.a.node == cable.b.node:
            yield Problem(f"fabric.cables[{i}]", "a cable from a node to itself", cable.a.node)
    plugged = {node for node, _ in used}
    for i, node in enumerate(spec.nodes):
        if node.name not in plugged and len(spec.nodes) > 1:
            yield Problem(f"nodes[{i}] ({node.name})", "not plugged into the fabric", node.name)


def _mtu_problems(spec: ClusterSpec, fabric: FabricSpec) -> Iterator[Problem]:
    for node in spec.nodes:
        profile = spec.hardware(node)
        if fabric.mtu > profile.max_mtu:
            yield Problem(
                "fabric.mtu",
                f"MTU {fabric.mtu} exceeds the {profile.max_mtu} that {node.hardware} carries",
                node.name,
            )
            return  # one node says it; the rest would repeat it
    if fabric.switch and fabric.mtu > fabric.switch.max_mtu:
        yield Problem(
            "fabric.mtu",
            f"MTU {fabric.mtu} exceeds switch {fabric.switch.name}'s max_mtu"
            f" {fabric.switch.max_mtu}",
        )


def _credentials_in_env(env: dict[str, str], stack: str) -> Iterator[Problem]:
    for name in sorted(env):
        if names_a_credential(name):
            yield Problem(
                f"serving.env.{name}",
                "looks like a credential, and a plain stack value would sit in clear in the"
                " stack file, the state and the engine container's env: remove it (a Hugging"
                f" Face token is the secret {set_secret(HF_TOKEN_KEY, stack)})",
            )


def _credentials_in_args(args: tuple[str, ...], stack: str) -> Iterator[Problem]:
    """`--api-key X` or `--hf-token=X` would put the key on the engine's command line: in the
    plan's output, the unit file and `ps` on every node."""
    for i, arg in enumerate(args):
        if arg.startswith("-") and names_a_credential(arg):
            flag = arg.split("=", 1)[0]
            yield Problem(
                f"serving.extra_args[{i}]",
                f"{flag} passes a credential on the engine's command line (the plan's output,"
                f" the unit file, `ps` on the node): remove it; for the Hub's token use"
                f" {set_secret(HF_TOKEN_KEY, stack)}",
            )


def _hub_online_with_staged_weights(spec: ClusterSpec) -> Iterator[Problem]:
    if spec.serving.weights is None:
        return
    for key in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        if key in spec.serving.env:
            yield Problem(
                f"serving.env.{key}",
                "planned: with serving.weights the engine serves the staged copy with the Hub"
                " offline (online, every node would download the model again); remove it",
            )


def _serving_problems(spec: ClusterSpec) -> Iterator[Problem]:
    disable = spec.serving.env.get("NCCL_IB_DISABLE", "").strip()
    rdma_nodes = [node.name for node in spec.nodes if spec.hardware(node).has_rdma]
    if disable not in ("", "0") and rdma_nodes:
        yield Problem(
            "serving.env.NCCL_IB_DISABLE",
            f"refused: NCCL_IB_DISABLE={disable} on RDMA hardware ({', '.join(rdma_nodes)}) forces"
            " NCCL onto TCP sockets. Seed 001 set it believing GPUDirect RDMA was needed; plain"
            " RoCE works on GB10, and removing the flag took decode from 25 to 40.4 tok/s (58%"
            " faster) and ended the run-to-run variance. Remove it; sparkrack sets the RoCE env.",
        )
    yield from _credentials_in_env(spec.serving.env, spec.stack)
    yield from _credentials_in_args(spec.serving.extra_args, spec.stack)
    yield from _hub_online_with_staged_weights(spec)
    length = spec.serving.max_model_len
    if length is not None and length > spec.model.max_position_embeddings:
        yield Problem(
            "serving.max_model_len",
            f"{length} exceeds the {spec.model.max_position_embeddings} positions"
            f" {spec.model.name} was trained for",
        )
