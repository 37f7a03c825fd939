"""What each role puts where, and as whom: the settings that were the roles' defaults files, now
a validated part of the stack (`roles:`), each field overridable, every default here.

Paths under the service user's home are given relative to it (`HomePath`); the Plan joins them
(plan.paths). What the roles own as fixed names (their unit files, the Containerfiles in their
folders) stays in the role.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, Field

from sparkrack.stackspec.base import StrictModel
from sparkrack.text.spectext import (
    DebianPackage,
    HomePath,
    ImageReference,
    NodePath,
    OneLine,
    PosixUser,
    ShortName,
)


def _id_range(value: str) -> str:
    start, _, count = value.partition(":")
    if not (start.isdigit() and count.isdigit() and int(count) > 0):
        raise ValueError(f"{value!r} is not start:count, as /etc/subuid has it (100000:65536)")
    return value


IdRange = Annotated[str, AfterValidator(_id_range)]


class ServiceUserSpec(StrictModel):
    """The rootless service user that runs every container."""

    name: PosixUser = "sparkrack"
    home: NodePath = "/home/sparkrack"
    # Above useradd's own pool (SUB_UID_MIN..SUB_UID_MAX, 100000..600100000 by default), which
    # gives the box's first login account 100000:65536 on Ubuntu, DGX OS and Debian alike: a
    # range shared with that account would map the service user's containers onto its files.
    # The User resource refuses a range another account holds.
    subuids: tuple[IdRange, ...] = ("1000000000:65536",)
    subgids: tuple[IdRange, ...] = ("1000000000:65536",)
    linger: bool = True  # its user manager (and so its Quadlet units) runs without a login


class BaseRoleSpec(StrictModel):
    """What every node needs before the other roles can work."""

    # Debian/Ubuntu packages that must be present; only the missing ones are installed (apt).
    packages: tuple[DebianPackage, ...] = (
        "podman",  # rootless containers (seeds 000, 001)
        "runc",  # the OCI runtime the podman role configures
        "uidmap",  # newuidmap/newgidmap for rootless user namespaces
        "rdma-core",  # RDMA userspace: NCCL over RoCE
        "infiniband-diags",  # ibstat, ibv_devinfo-style checks
        "perftest",  # ib_write_bw: the fabric's own speed test
        "numactl",
        "irqbalance",  # the cpu_pinning role bans it from the compute cores
        "chrony",  # Ray and NCCL time out on skewed clocks
        "nftables",  # the node fence: the planned ports answer the rack and its clients only
        # The head's download runs huggingface_hub, from a venv with PyPI's where the
        # distribution packages none (Ubuntu 24.04, DGX OS 7): `python3 -m venv` needs this.
        "python3-venv",
    )
    service_user: ServiceUserSpec = ServiceUserSpec()
    # SSH trust from the head to the others (image and weight shipping): a key made on the head,
    # in the service user's ~/.ssh under this name; its private half never leaves the head.
    trust_key_name: ShortName = "sparkrack_cluster_ed25519"
    hosts_block: ShortName = "cluster"  # sparkrack's block in /etc/hosts; the rest is the node's


class CpuPinningRoleSpec(StrictModel):
    """NIC interrupts and irqbalance kept off the compute cores (seed 000: IRQs on the compute
    cores took 20 tok/s down to 4). The core lists are the Plan's (NodePlan.cpus)."""

    irq_pattern: ShortName = "mlx5_"  # the NIC's interrupts, as /proc/interrupts names them
    irq_script: NodePath = "/usr/local/sbin/sparkrack-irq-affinity"
    irqbalance_defaults: NodePath = "/etc/default/irqbalance"


class FabricRoleSpec(StrictModel):
    dhcp_script: NodePath = "/usr/local/sbin/sparkrack-udhcpc-script"  # switched racks' udhcpc
    # /bin/busybox, whose udhcpc leases a DHCP rack's links (Debian and Ubuntu package it so).
    dhcp_client_package: DebianPackage = "busybox-static"


class InferenceRoleSpec(StrictModel):
    """Where the engine's files live, under the service user's home."""

    # A Hugging Face cache per node, mounted at the image's HF_HOME. Kept by `pulumi destroy`: a
    # destroy must never cost a 122 GB (or 1.5 TB) download. `serving.model_dir` replaces it.
    model_dir: HomePath = ".cache/huggingface"
    ray_dir: HomePath = ".local/share/sparkrack/ray"  # Ray's session dir, shared with vLLM
    # `vllm serve`'s output, every rank's NCCL lines among it: the RDMA collector reads it.
    engine_log: HomePath = ".local/share/sparkrack/engine/vllm.log"
    # How long the head waits for the OpenAI API after `vllm serve` starts: loading 122 GB of
    # weights from a local disk takes minutes, not seconds.
    api_ready_timeout_s: float = Field(default=1800, gt=0)


class MonitoringRoleSpec(StrictModel):
    """Where the exporters and Prometheus keep their files, under the service user's home."""

    textfile_dir: HomePath = ".local/share/sparkrack/textfile"  # rdma.prom, for node-exporter
    prometheus_config_dir: HomePath = ".config/sparkrack/prometheus"
    prometheus_data_dir: HomePath = ".local/share/sparkrack/prometheus"  # removed by destroy
    grafana_dir: HomePath = ".config/sparkrack/grafana"  # written even where Grafana is not run
    # Mounted read-only into the RDMA collector: the directory above the engine log, which
    # exists before the engine's own does (the collector reads NCCL's transport lines there).
    engine_log_mount: HomePath = ".local/share/sparkrack"
    # With `monitoring.image_source: build`, the images' bases, on the head already as the
    # engine's base must be, each pinned to one build: Debian's dated trixie snapshot (13.3;
    # docker-library/official-images library/debian at 00c85064 tags it `trixie-20260202-slim`),
    # and the Go release cAdvisor is built with here (it needs 1.26, trixie's is older; the
    # golang image is tagged per Go release, and tests/unit/test_image_pins.py holds the release
    # to the Go module proxy).
    debian_image: ImageReference = "docker.io/library/debian:trixie-20260202-slim"
    golang_image: ImageReference = "docker.io/library/golang:1.26.8-trixie"


class PodmanRoleSpec(StrictModel):
    """Rootless Podman for the service user, host networking."""

    runtime: Literal["runc", "crun"] = "runc"  # crun refuses hybrid-cgroup hosts (the sim's)
    storage_driver: Literal["overlay", "vfs"] = "overlay"  # native rootless since kernel 5.11
    # None by default: the engine's defaults (nofile 1048576) can exceed what the host grants a
    # rootless user, and a container asking more than the hard limit does not start. Each
    # container's own ulimits (memlock from the Plan) are set on it.
    default_ulimits: tuple[OneLine, ...] = ()
    # Registries searched for short names: none. Images are named in full and shipped.
    unqualified_search_registries: tuple[ShortName, ...] = ()


class RolesSpec(StrictModel):
    """Every role's settings, one field per role, in the order `up` deploys them: the role list
    (ROLE_NAMES) is these fields."""

    base: BaseRoleSpec = BaseRoleSpec()
    fabric: FabricRoleSpec = FabricRoleSpec()
    cpu_pinning: CpuPinningRoleSpec = CpuPinningRoleSpec()
    podman: PodmanRoleSpec = PodmanRoleSpec()
    inference: InferenceRoleSpec = InferenceRoleSpec()
    monitoring: MonitoringRoleSpec = MonitoringRoleSpec()


ROLE_NAMES: tuple[str, ...] = tuple(RolesSpec.model_fields)
# What every node has below the engine; the inference and monitoring roles span the rack.
NODE_ROLES: tuple[str, ...] = ROLE_NAMES[: ROLE_NAMES.index("podman") + 1]


def _known_role(name: str) -> str:
    if name not in ROLE_NAMES:
        raise ValueError(f"no role {name!r}: the roles are {', '.join(ROLE_NAMES)}")
    return name


RoleName = Annotated[str, AfterValidator(_known_role)]
