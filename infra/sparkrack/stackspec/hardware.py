"""Hardware profiles: NICs and their ports, CPU layout, memory, what the box carries."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import (
    Field,
    model_validator,
)

from sparkrack.stackspec.base import Size, SomeCpus, StrictModel
from sparkrack.text.spectext import (
    DebianPackage,
    Netdev,
    NodePath,
    OneLine,
    RdmaDevice,
    ShortName,
)


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
    efficiency: SomeCpus
    performance: SomeCpus

    @model_validator(mode="after")
    def _within_count_and_disjoint(self) -> CpuLayout:
        efficiency, performance = self.efficiency, self.performance
        if max(*efficiency, *performance) >= self.count:
            raise ValueError(f"CPU lists name CPUs beyond the {self.count} this hardware has")
        if efficiency.overlaps(performance):
            raise ValueError("efficiency and performance CPU lists overlap")
        return self


class GpuAccess(StrictModel):
    """How a container gets the node's GPUs: NVIDIA's CDI devices, which nvidia-container-toolkit
    describes in a CDI spec (generated for the running driver), given to Podman by name; or none,
    where no GPU exists (a simulated node)."""

    kind: Literal["cdi", "none"] = "cdi"
    devices: tuple[OneLine, ...] = ("nvidia.com/gpu=all",)
    # DGX OS ships the toolkit; elsewhere the base role installs the package from the node's
    # configured apt sources (NVIDIA's repository, which the operator adds).
    toolkit: Literal["preinstalled", "apt"] = "apt"
    toolkit_package: DebianPackage = "nvidia-container-toolkit"
    cdi_spec: NodePath = "/etc/cdi/nvidia.yaml"

    def container_devices(self) -> tuple[str, ...]:
        """What a GPU-using container is given (`podman run --device`)."""
        return self.devices if self.kind == "cdi" else ()


class EngineSettings(StrictModel):
    """What the field reports say of the engine on this hardware, each with its source, shown by
    `sparkrack plan` beside the engine: the GPU memory share a report ran stably (a stack asking
    more is told so), and notes."""

    tested_gpu_memory_utilization: float | None = Field(default=None, gt=0, le=1)
    notes: tuple[OneLine, ...] = ()


# The precisions a decode step's matrix products run at: fp4 (W4A4, Blackwell), fp8 (W8A8; the
# datasheets list int8 at the same rate), bf16 (16-bit, and weight-only 4-bit paths such as Marlin,
# which multiply in 16 bits).
TensorPrecision = Literal["fp4", "fp8", "bf16"]

MOVED_TO_DECODE_MODEL = {
    "decode_efficiency",
    "fabric_allreduce_us",
    "nvlink_allreduce_us",
    "pp_hop_us",
}


class HardwareProfile(StrictModel):
    """One kind of node. The catalogue ships gb10, gx10 and 8-GPU servers (h100-8, h200-8, b200-8,
    h20-8); stacks may add their own."""

    description: OneLine
    # A stand-in the simulator builds (`sparkrack sim`), never a machine: a stack is all of them
    # or none, so that no real node is ever planned with a simulated node's declared facts.
    simulated: bool = False
    gpus: int = Field(default=1, ge=1)
    gpu_memory: Size = Field(description="per GPU, as visible to the GPU")
    memory_bandwidth_gb_s: float = Field(gt=0, description="per GPU, decimal GB/s")
    # NVLink between the GPUs of one box, per GPU and direction (decimal GB/s): what tensor
    # parallel inside the box all-reduces over. None: no NVLink (a GB10 has one GPU).
    nvlink_gb_s: float | None = Field(default=None, gt=0)
    # Dense tensor-core peak per GPU, decimal TFLOPS, by precision (a datasheet's "with sparsity"
    # figure halved): the compute ceiling of a decode step. Empty: unknown, no compute ceiling.
    tensor_tflops: dict[TensorPrecision, Annotated[float, Field(gt=0)]] = {}
    cpus: CpuLayout
    management_nic: Netdev
    ports: tuple[NicPort, ...] = ()
    max_mtu: int = Field(default=1500, ge=1280)
    assumed_power_watts: float = Field(gt=0, description="at the wall; no sensor reads it")
    # Which constants of the decode model (catalog/decode_model.yaml) apply: gb10, hbm. None:
    # chosen by bandwidth, and the estimate says the class is a guess.
    decode_class: ShortName | None = None
    # What carries tensor parallel between boxes: RoCE (Ethernet) or InfiniBand.
    fabric_transport: Literal["roce", "infiniband"] = "roce"
    # NCCL registers RDMA memory: below unlimited it silently falls back to sockets (FACTS). A
    # node that cannot grant unlimited (the simulator's containers) declares what it can.
    memlock_limit: Size | Literal["unlimited"] = "unlimited"
    # Whose IRQs the cpu_pinning role keeps on the housekeeping cores, and verification looks
    # for: the ConnectX driver's. `none` only where no NIC driver raises IRQs (the simulator's
    # veths); then the IRQ check skips saying so, and everywhere else their absence fails it.
    nic_irqs: Literal["mlx5", "none"] = "mlx5"
    gpu_access: GpuAccess = GpuAccess()
    engine: EngineSettings = EngineSettings()

    @model_validator(mode="before")
    @classmethod
    def _moved_to_decode_model(cls, data: object) -> object:
        if isinstance(data, dict) and (moved := sorted(set(data) & MOVED_TO_DECODE_MODEL)):
            raise ValueError(
                f"{', '.join(moved)}: decode constants now live in catalog/decode_model.yaml,"
                " fitted to published runs; refit them for your rack with"
                " `sparkrack estimate --calibration` (rows from `sparkrack bench`)"
            )
        return data

    @property
    def has_rdma(self) -> bool:
        return any(f.rdma_device for port in self.ports for f in port.functions)

    def port(self, name: str) -> NicPort | None:
        return next((port for port in self.ports if port.name == name), None)
