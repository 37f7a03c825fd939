"""The cluster as the user declares it: pydantic models, validation only, no I/O.

`load.py` turns stack config into a `ClusterSpec` (resolving catalogue names and model files) and
then runs `cross_check`, the checks that need more than one field. Arithmetic checks (does the model
fit, does TP divide the heads) belong to the planner, which raises the same `SpecError`.

Units are in the field names or in the type: `ByteSize` fields take "121.6 GiB" (binary) or
"122 GB" (decimal) and hold bytes; bandwidth is decimal GB/s; parameter counts take "2.8T", "10B".
"""

from __future__ import annotations

import ipaddress
import re
from collections import Counter
from collections.abc import Iterable, Iterator
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ByteSize,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)

from sparkrack.errors import Problem
from sparkrack.spectext import (
    EnvName,
    GitRevision,
    HfRepo,
    HttpUrl,
    ImageReference,
    LocalPath,
    Netdev,
    NodeName,
    NodePath,
    OneLine,
    PosixUser,
    RdmaDevice,
    ServedName,
    ShortName,
)


class StrictModel(BaseModel):
    """Unknown keys are errors: a typo must not silently become a default."""

    model_config = ConfigDict(extra="forbid", frozen=True)


# --- value types ------------------------------------------------------------------------------

_PARAM_SUFFIXES = {"": 1.0, "K": 1e3, "M": 1e6, "B": 1e9, "T": 1e12}
_PARAM_COUNT = re.compile(r"\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([KMBT]?)\s*")


def _parse_param_count(value: object) -> object:
    # YAML 1.1 reads "2.8e12" as a string, so accept it and the readable "2.8T" alike.
    if isinstance(value, str) and (match := _PARAM_COUNT.fullmatch(value)):
        return float(match[1]) * _PARAM_SUFFIXES[match[2]]
    return value


ParamCount = Annotated[float, BeforeValidator(_parse_param_count), Field(gt=0)]

_SIZE_TEXT = re.compile(r"\s*[0-9]*\.?[0-9]+\s*[A-Za-z]*\s*")


def _size_text(value: object) -> object:
    # pydantic says "could not parse value and unit" of a negative size, and of a typo alike.
    negative = isinstance(value, int | float) and value < 0
    if negative or (isinstance(value, str) and value.strip().startswith("-")):
        raise ValueError(f"{value!r} is negative: a size is a number of bytes, 0 or more")
    if isinstance(value, str) and not _SIZE_TEXT.fullmatch(value):
        raise ValueError(
            f"{value!r} is not a size: a number and a unit, like '121.6 GiB' or '122 GB'"
        )
    return value


Size = Annotated[ByteSize, BeforeValidator(_size_text)]


def parse_cpulist(text: str) -> tuple[int, ...]:
    """`0-4,10-14` -> (0, 1, 2, 3, 4, 10, ...), the kernel's cpulist format."""
    cpus: set[int] = set()
    for part in text.replace(" ", "").split(","):
        if not part:
            continue
        first, _, last = part.partition("-")
        if not first.isdigit() or (last and not last.isdigit()):
            raise ValueError(f"{text!r} is not a CPU list like '0-4,10-14'")
        low, high = int(first), int(last or first)
        if high < low:
            raise ValueError(f"{part!r} runs backwards in CPU list {text!r}")
        cpus.update(range(low, high + 1))
    if not cpus:
        raise ValueError("a CPU list needs at least one CPU")
    return tuple(sorted(cpus))


def format_cpulist(cpus: Iterable[int]) -> str:
    """The inverse of `parse_cpulist`, with ranges collapsed."""
    ordered = sorted(set(cpus))
    runs: list[str] = []
    start = previous = ordered[0]
    for cpu in [*ordered[1:], None]:
        if cpu is not None and cpu == previous + 1:
            previous = cpu
            continue
        runs.append(str(start) if start == previous else f"{start}-{previous}")
        if cpu is not None:
            start = previous = cpu
    return ",".join(runs)


CpuList = Annotated[str, AfterValidator(lambda text: format_cpulist(parse_cpulist(text)))]

_HOSTNAME = re.compile(
    r"(?=.{1,253}$)([a-zA-Z0-9]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?)(\.[a-zA-Z0-9-]+)*"
)


def _address(value: str) -> str:
    try:
        return str(ipaddress.ip_address(value))
    except ValueError:
        if re.fullmatch(r"[0-9.]+", value):
            raise ValueError(f"{value!r} is not an IPv4 address (a typo?)") from None
        if _HOSTNAME.fullmatch(value):
            return value
    raise ValueError(f"{value!r} is neither an IP address nor a host name")


Address = Annotated[str, AfterValidator(_address)]


# --- hardware ---------------------------------------------------------------------------------


class NicFunction(StrictModel):
    """One PCIe function of a NIC port: its netdev and, on RDMA hardware, its RDMA device."""

    netdev: Netdev
    rdma_device: RdmaDevice | None = None
    pcie_lanes: int | None = Field(default=None, ge=1)


class NicPort(StrictModel):
    """A physical port. On GB10 each port shows up as two functions (two PCIe x4 halves)."""

    name: ShortName
    speed_gbps: float = Field(gt=0)
    functions: tuple[NicFunction, ...] = Field(min_length=1)


class CpuLayout(StrictModel):
    """Core layout. `efficiency` cores take housekeeping (IRQs, exporters), `performance` cores
    take inference; on servers without core types, `efficiency` names the cores kept free."""

    count: int = Field(gt=0)
    efficiency: CpuList
    performance: CpuList

    @model_validator(mode="after")
    def _within_count_and_disjoint(self) -> CpuLayout:
        efficiency, performance = (
            set(parse_cpulist(self.efficiency)),
            parse_cpulist(self.performance),
        )
        if max(efficiency | set(performance)) >= self.count:
            raise ValueError(f"CPU lists name CPUs beyond the {self.count} this hardware has")
        if efficiency.intersection(performance):
            raise ValueError("efficiency and performance CPU lists overlap")
        return self


class HardwareProfile(StrictModel):
    """One kind of node. The catalogue ships gb10, gx10 and h200-8; stacks may add their own."""

    description: OneLine
    # A stand-in the simulator builds (`sparkrack sim`), never a machine: a stack is all of them
    # or none, so that no real node is ever planned with a simulated node's declared facts.
    simulated: bool = False
    gpus: int = Field(default=1, ge=1)
    gpu_memory: Size = Field(description="per GPU, as visible to the GPU")
    memory_bandwidth_gb_s: float = Field(gt=0, description="per GPU, decimal GB/s")
    cpus: CpuLayout
    management_nic: Netdev
    ports: tuple[NicPort, ...] = ()
    max_mtu: int = Field(default=1500, ge=1280)
    assumed_power_watts: float = Field(gt=0, description="at the wall; no sensor reads it")
    nvlink_allreduce_us: float | None = Field(default=None, gt=0)
    fabric_allreduce_us: float = Field(gt=0, description="two ranks; grows with each rank")
    pp_hop_us: float = Field(gt=0)
    decode_efficiency: float = Field(gt=0, le=1)
    # NCCL registers RDMA memory: below unlimited it silently falls back to sockets (FACTS). A
    # node that cannot grant unlimited (the simulator's containers) declares what it can.
    memlock_limit: Size | Literal["unlimited"] = "unlimited"

    @property
    def has_rdma(self) -> bool:
        return any(f.rdma_device for port in self.ports for f in port.functions)

    def port(self, name: str) -> NicPort | None:
        return next((port for port in self.ports if port.name == name), None)


# --- nodes ------------------------------------------------------------------------------------


class SshDefaults(StrictModel):
    user: PosixUser
    port: int = Field(default=22, ge=1, le=65535)
    key_path: LocalPath = "~/.ssh/id_ed25519"
    # Host keys are pinned: a node whose key is not in this file is refused, never auto-added.
    known_hosts: LocalPath = "~/.ssh/known_hosts"


class SshOverride(StrictModel):
    user: PosixUser | None = None
    port: int | None = Field(default=None, ge=1, le=65535)
    key_path: LocalPath | None = None
    known_hosts: LocalPath | None = None


class NodeOverrides(StrictModel):
    """What one node may declare differently from its hardware profile."""

    management_nic: Netdev | None = None
    housekeeping_cpus: CpuList | None = None
    compute_cpus: CpuList | None = None
    gpu_memory: Size | None = None


class NodeSpec(StrictModel):
    name: NodeName
    address: Address = Field(description="management address (SSH, Ray, NCCL bootstrap)")
    hardware: ShortName
    ssh: SshOverride = SshOverride()
    overrides: NodeOverrides = NodeOverrides()


# --- fabric -----------------------------------------------------------------------------------


def _parse_endpoint(value: object) -> object:
    if isinstance(value, str):
        node, _, port = value.partition(":")
        return {"node": node, "port": port or None}
    return value


class Endpoint(StrictModel):
    """`node:port`, or just `node` for the first port of its hardware."""

    node: NodeName
    port: ShortName | None = None


EndpointRef = Annotated[Endpoint, BeforeValidator(_parse_endpoint)]


class Cable(StrictModel):
    """A direct cable. Crossed cables (port 0 to port 1) are normal: declare what is plugged."""

    a: EndpointRef
    b: EndpointRef


class SwitchPort(StrictModel):
    name: ShortName
    breakout: int = Field(default=1, ge=1, le=8, description="nodes one port carries")
    nodes: tuple[EndpointRef, ...] = Field(min_length=1)

    @model_validator(mode="after")
    def _fits_breakout(self) -> SwitchPort:
        if len(self.nodes) > self.breakout:
            raise ValueError(f"{len(self.nodes)} nodes on a port with breakout {self.breakout}")
        return self


class SwitchSpec(StrictModel):
    name: ShortName = "switch"
    max_mtu: int = Field(default=9216, ge=1280, description="the usual switch jumbo maximum")
    ports: tuple[SwitchPort, ...] = Field(min_length=1)


class FabricSpec(StrictModel):
    mtu: int = Field(default=9000, ge=1280)
    addressing: Literal["static", "dhcp"] = "static"
    subnet: ipaddress.IPv4Network | None = Field(
        default=None, description="static: pool carved into one /24 per link or switch rail"
    )
    cables: tuple[Cable, ...] = ()
    switch: SwitchSpec | None = None

    @model_validator(mode="after")
    def _one_topology_and_a_pool(self) -> FabricSpec:
        if self.cables and self.switch:
            raise ValueError("declare either cables or a switch, not both")
        if not self.cables and not self.switch:
            raise ValueError("declare the cables or the switch the nodes are plugged into")
        if self.addressing == "static" and self.subnet is None:
            raise ValueError("static addressing needs a subnet to allocate from")
        if self.subnet is not None and self.subnet.prefixlen > 24:
            raise ValueError(f"subnet {self.subnet} is smaller than one /24")
        return self

    def endpoints(self) -> Iterator[tuple[str, Endpoint]]:
        """Every plugged endpoint with its field path."""
        for i, cable in enumerate(self.cables):
            yield f"fabric.cables[{i}].a", cable.a
            yield f"fabric.cables[{i}].b", cable.b
        for i, port in enumerate(self.switch.ports if self.switch else ()):
            for j, endpoint in enumerate(port.nodes):
                yield f"fabric.switch.ports[{i}].nodes[{j}]", endpoint


# --- model ------------------------------------------------------------------------------------

LayerKind = Literal["gqa", "mla", "linear"]


class AttentionSpec(StrictModel):
    """How a model attends, which decides what its KV cache costs.

    gqa: K and V per KV head per token. mla: one compressed latent (kv_lora_rank + rope_head_dim)
    per token. linear: a constant recurrent state per sequence. hybrid: `layer_kinds` counts each.
    """

    type: Literal["gqa", "mla", "linear", "hybrid"]
    heads: int = Field(gt=0)
    kv_heads: int | None = Field(default=None, gt=0)
    head_dim: int = Field(gt=0)
    kv_lora_rank: int | None = Field(default=None, gt=0)
    rope_head_dim: int | None = Field(default=None, ge=0)
    layer_kinds: dict[LayerKind, Annotated[int, Field(gt=0)]] = {}
    linear_heads: int | None = Field(default=None, gt=0)
    linear_head_dim: int | None = Field(default=None, gt=0)
    linear_state_bytes: float = Field(default=4.0, gt=0, description="fp32 recurrent state")

    def kinds(self, layers: int) -> dict[LayerKind, int]:
        return dict(self.layer_kinds) if self.type == "hybrid" else {self.type: layers}

    @model_validator(mode="after")
    def _fields_for_each_kind(self) -> AttentionSpec:
        kinds = set(self.layer_kinds) if self.type == "hybrid" else {self.type}
        if self.type == "hybrid" and len(self.layer_kinds) < 2:
            raise ValueError("a hybrid model needs layer_kinds with at least two kinds")
        if self.type != "hybrid" and self.layer_kinds:
            raise ValueError("layer_kinds is for type: hybrid")
        if "gqa" in kinds and self.kv_heads is None:
            raise ValueError("gqa attention needs kv_heads")
        if self.kv_heads is not None and self.heads % self.kv_heads:
            raise ValueError(f"kv_heads {self.kv_heads} does not divide heads {self.heads}")
        if "mla" in kinds and (self.kv_lora_rank is None or self.rope_head_dim is None):
            raise ValueError("mla attention needs kv_lora_rank and rope_head_dim")
        return self


class ModelSpec(StrictModel):
    name: OneLine
    total_params: ParamCount
    active_params: ParamCount | None = Field(default=None, description="MoE; default: dense")
    layers: int = Field(gt=0)
    hidden_size: int = Field(gt=0)
    attention: AttentionSpec
    weight_bytes: Size | None = Field(default=None, description="the checkpoint as shipped")
    bytes_per_param: float | None = Field(default=None, gt=0, le=4)
    quantization: ShortName
    kv_cache_bytes: float = Field(default=2.0, gt=0, description="per element at dtype auto")
    max_position_embeddings: int = Field(gt=0)
    hf_repo: HfRepo
    hf_overrides: dict[str, Any] = {}

    @model_validator(mode="after")
    def _consistent(self) -> ModelSpec:
        if self.weight_bytes is None and self.bytes_per_param is None:
            raise ValueError("give weight_bytes or bytes_per_param")
        if self.active_params is not None and self.active_params > self.total_params:
            raise ValueError("active_params exceeds total_params")
        if self.attention.type == "hybrid" and sum(self.attention.layer_kinds.values()) != (
            self.layers
        ):
            raise ValueError(
                f"attention.layer_kinds sum to {sum(self.attention.layer_kinds.values())},"
                f" not the {self.layers} layers"
            )
        return self


# --- serving, monitoring, pinning ---------------------------------------------------------------


def _parallel_size(value: object) -> object:
    if value == "auto" or (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
        return value
    raise ValueError(f"must be a positive integer or 'auto', not {value!r}")


ParallelSize = Annotated[int | Literal["auto"], BeforeValidator(_parallel_size)]

# Flags the plan derives; setting them again in extra_args would fight the plan.
PLANNED_VLLM_FLAGS = {
    "--tensor-parallel-size": "serving.tensor_parallel_size",
    "--pipeline-parallel-size": "serving.pipeline_parallel_size",
    "--gpu-memory-utilization": "serving.gpu_memory_utilization",
    "--max-model-len": "serving.max_model_len",
    "--max-num-seqs": "serving.max_num_seqs",
    "--distributed-executor-backend": "the plan (ray across nodes)",
    "--hf-overrides": "model.hf_overrides",
    "--kv-cache-dtype": "serving.kv_cache_dtype",
    "--port": "serving.port",
    "--host": "the plan (the head's management address)",
}

KV_CACHE_DTYPE_BYTES: dict[str, float | None] = {
    "auto": None,  # the model's kv_cache_bytes
    "bfloat16": 2.0,
    "fp8": 1.0,
    "fp8_e4m3": 1.0,
    "fp8_e5m2": 1.0,
}


class WeightsSpec(StrictModel):
    """Where the head gets the checkpoint that sparkrack then ships to every node's model dir:
    `download` the model's Hugging Face repo (a token, if the repo needs one, is the Pulumi
    secret `sparkrack:hfToken`), or a `directory` already on the head. With pipeline parallelism
    each node gets only its stage's shards (`layer_aware`), over the fabric, node to node."""

    source: Literal["download", "directory"]
    directory: NodePath | None = Field(default=None, description="on the head")
    revision: GitRevision = "main"
    endpoint: HttpUrl = "https://huggingface.co"  # HF_ENDPOINT
    layer_aware: bool = True

    @model_validator(mode="after")
    def _directory_for_directory(self) -> WeightsSpec:
        if self.source == "directory" and self.directory is None:
            raise ValueError("source: directory needs `directory`, the checkpoint on the head")
        return self


class ServingSpec(StrictModel):
    engine: Literal["vllm"] = "vllm"
    image: ImageReference
    tensor_parallel_size: ParallelSize = "auto"
    pipeline_parallel_size: ParallelSize = "auto"
    gpu_memory_utilization: float = 0.80
    max_model_len: int | None = Field(default=None, gt=0, description="default: the model's")
    max_num_seqs: int | None = Field(default=None, gt=0, description="concurrency target")
    kv_cache_dtype: Literal["auto", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2"] = "auto"
    runtime_budget_factor: float = Field(default=1.18, ge=1, description="seed 002")
    runtime_reserve_per_gpu: Size = Field(
        default=ByteSize(2 * 2**30), description="activations, CUDA graphs, NCCL buffers"
    )
    # Where the head gets the image: `build` it from roles/inference/files/Containerfile, find
    # it already `present` (pulled by the operator), or `control`: `podman save` on the machine
    # running Pulumi, loaded on the head. The other nodes get it from the head over the fabric.
    image_source: Literal["build", "present", "control"] = "present"
    shm_size: Size = Field(
        default=ByteSize(16 * 2**30), description="/dev/shm: Ray's object store, NCCL buffers"
    )
    # A directory on every node that already holds the weights (the HF cache layout), mounted as
    # it is; by default the inference role keeps one per node, retained by `pulumi destroy`.
    model_dir: NodePath | None = None
    # The checkpoint sparkrack distributes into the model dirs; None: the operator fills them.
    weights: WeightsSpec | None = None
    port: int = Field(default=8000, ge=1, le=65535)
    # Ray workers that start together; the next batch starts once these have joined. None: all
    # at once. For hosts short of CPU: Ray gives a starting node fixed times (30 s to register,
    # agents included), which sixteen nodes starting together on two shared cores exceed.
    ray_join_batch: int | None = Field(default=None, ge=1)
    served_model_name: ServedName | None = None
    extra_args: tuple[OneLine, ...] = ()
    env: dict[EnvName, OneLine] = {}

    @field_validator("gpu_memory_utilization")
    @classmethod
    def _utilization_in_range(cls, value: float) -> float:
        if not 0 < value <= 1:
            raise ValueError(
                f"{value} is outside (0, 1]: it is the fraction of GPU-visible memory vLLM may"
                " claim (0.80 leaves room for the OS on GB10 unified memory)"
            )
        return value

    @field_validator("extra_args")
    @classmethod
    def _no_planned_flags(cls, args: tuple[str, ...]) -> tuple[str, ...]:
        for arg in args:
            flag = arg.split("=", 1)[0]
            if flag in PLANNED_VLLM_FLAGS:
                raise ValueError(f"{flag} is planned from {PLANNED_VLLM_FLAGS[flag]}; set it there")
        return args


# node-exporter collectors that hung scrapes under RDMA load in seed 001.
HANGING_COLLECTORS = {
    "infiniband": "hangs node-exporter under RDMA load (seed 001); RDMA counters are read from "
    "/sys/class/infiniband instead",
    "cpufreq": "hung node-exporter scrapes on a GB10 under load (seed 001)",
}


class AlertThresholds(StrictModel):
    kv_cache_near_full: float = Field(default=0.9, gt=0, le=1, description="vLLM KV cache share")
    # The verification suite's scrape limit: seed 001's healthy node-exporter answered in ~5 ms.
    node_exporter_slow_s: float = Field(default=1.0, gt=0)


class TariffSpec(StrictModel):
    """Electricity price, for the dashboard's energy cost (seed 001: 1.04 zł/kWh, Kraków G11)."""

    per_kwh: float = Field(gt=0)
    currency: OneLine


class MonitoringSpec(StrictModel):
    enabled: bool = True
    scrape_interval_s: int = Field(default=15, ge=1)
    # Below the interval, so a stuck exporter shows as down rather than piling up scrapes
    # (seed 001). None: two thirds of the interval.
    scrape_timeout_s: float | None = Field(default=None, gt=0)
    alerts: AlertThresholds = AlertThresholds()
    tariff: TariffSpec | None = None
    # Unified memory (GB10) leaves nvidia-smi's memory fields [N/A]: read /proc/meminfo instead.
    gpu_memory_from: Literal["meminfo", "nvidia-smi"] = "meminfo"
    prometheus_port: int = Field(default=9090, ge=1, le=65535)
    grafana_port: int = Field(default=3000, ge=1, le=65535)
    node_exporter_port: int = Field(default=9100, ge=1, le=65535)
    gpu_exporter_port: int = Field(default=9835, ge=1, le=65535)
    cadvisor_port: int = Field(default=8080, ge=1, le=65535)
    # The monitoring role's images (roles/monitoring): node-exporter, cAdvisor and sparkrack's GPU
    # and RDMA collectors in one; Prometheus in another; Grafana only where one is named.
    exporters_image: ImageReference = "localhost/sparkrack/exporters:latest"
    prometheus_image: ImageReference = "localhost/sparkrack/prometheus:latest"
    grafana_image: ImageReference | None = None
    # Where the head gets them, as serving.image_source says for the engine: `build` (the
    # exporters and Prometheus from roles/monitoring/templates; Grafana must be `present`),
    # `present`, or `control`. The other nodes get the exporters from the head over the fabric.
    image_source: Literal["build", "present", "control"] = "present"
    node_exporter_collectors: tuple[ShortName, ...] = (
        "cpu",
        "diskstats",
        "filesystem",
        "hwmon",
        "loadavg",
        "meminfo",
        "netdev",
        "pressure",
        "stat",
        "textfile",  # the RDMA counters and the NCCL transport, written by rdma_textfile.py
        "time",
        "uname",
    )

    @field_validator("node_exporter_collectors")
    @classmethod
    def _no_hanging_collectors(cls, collectors: tuple[str, ...]) -> tuple[str, ...]:
        for name in collectors:
            if name in HANGING_COLLECTORS:
                raise ValueError(f"collector {name!r} {HANGING_COLLECTORS[name]}")
        return collectors

    @model_validator(mode="after")
    def _timeout_below_interval(self) -> MonitoringSpec:
        if self.scrape_timeout_s is not None and self.scrape_timeout_s >= self.scrape_interval_s:
            raise ValueError(
                f"scrape_timeout_s {self.scrape_timeout_s:g} must be below scrape_interval_s"
                f" {self.scrape_interval_s}: slow scrapes would pile up (seed 001)"
            )
        return self


class CpuPinningSpec(StrictModel):
    """Housekeeping (IRQs, exporters) on efficiency cores, inference on performance cores: IRQs on
    the compute cores took a GB10 from 20 tok/s to 4 (seed 000)."""

    enabled: bool = True
    move_irqs: bool = True


class ClusterSpec(StrictModel):
    stack: ShortName
    hardware_profiles: dict[str, HardwareProfile]
    ssh: SshDefaults
    nodes: tuple[NodeSpec, ...] = Field(min_length=1)
    fabric: FabricSpec | None = None
    model: ModelSpec
    serving: ServingSpec
    monitoring: MonitoringSpec = MonitoringSpec()
    cpu_pinning: CpuPinningSpec = CpuPinningSpec()

    def hardware(self, node: NodeSpec) -> HardwareProfile:
        return self.hardware_profiles[node.hardware]

    def node(self, name: str) -> NodeSpec:
        return next(node for node in self.nodes if node.name == name)

    def endpoint_port(self, endpoint: Endpoint) -> NicPort:
        """The port an endpoint names, defaulting to its hardware's first. Needs cross_check."""
        profile = self.hardware(self.node(endpoint.node))
        port = profile.port(endpoint.port) if endpoint.port else profile.ports[0]
        assert port is not None, "cross_check rejects endpoints on missing ports"
        return port


# --- checks across fields -----------------------------------------------------------------------


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
    return problems


def _sizes_beyond_the_node(spec: ClusterSpec) -> Iterator[Problem]:
    """Sizes bounded by what the node has: its GPU memory is all an engine container gets to
    use on GB10's unified memory, and per GPU on a server."""
    for i, node in enumerate(spec.nodes):
        profile = spec.hardware(node)
        override = node.overrides.gpu_memory
        if override is not None and override > profile.gpu_memory:
            yield Problem(
                f"nodes[{i}] ({node.name}).overrides.gpu_memory",
                f"{override.human_readable()} is more than {node.hardware}'s"
                f" {profile.gpu_memory.human_readable()} per GPU: an override only declares less",
                node.name,
            )
        memory = override or profile.gpu_memory
        for field in ("shm_size", "runtime_reserve_per_gpu"):
            size = getattr(spec.serving, field)
            if size >= memory:
                yield Problem(
                    f"serving.{field}",
                    f"{size.human_readable()} is not below the {memory.human_readable()} of GPU"
                    " memory this node has",
                    node.name,
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
        if cpus and max(parse_cpulist(cpus)) >= profile.cpus.count:
            yield Problem(
                f"{where}.overrides.{field}",
                f"{cpus} names CPUs beyond the {profile.cpus.count} of {node.hardware}",
                node.name,
            )
    housekeeping, compute = cpu_sets.values()
    if housekeeping and compute and set(parse_cpulist(housekeeping)) & set(parse_cpulist(compute)):
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


# An env name with one of these words in it holds a credential: a plain stack value lands in the
# engine container's env, the state and the stack file in clear.
CREDENTIAL_WORDS = ("TOKEN", "PASSWORD", "PASSWD", "SECRET", "CREDENTIAL")


def _looks_like_a_credential(name: str) -> bool:
    parts = name.upper().split("_")
    return any(word in part for part in parts for word in CREDENTIAL_WORDS) or any(
        part in ("KEY", "APIKEY") for part in parts
    )


def _credentials_in_env(env: dict[str, str]) -> Iterator[Problem]:
    for name in sorted(env):
        if _looks_like_a_credential(name):
            yield Problem(
                f"serving.env.{name}",
                "looks like a credential, and a plain stack value would sit in clear in the"
                " stack file, the state and the engine container's env: remove it (a Hugging"
                " Face token is the secret `pulumi config set --secret sparkrack:hfToken ...`)",
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
    yield from _credentials_in_env(spec.serving.env)
    length = spec.serving.max_model_len
    if length is not None and length > spec.model.max_position_embeddings:
        yield Problem(
            "serving.max_model_len",
            f"{length} exceeds the {spec.model.max_position_embeddings} positions"
            f" {spec.model.name} was trained for",
        )
