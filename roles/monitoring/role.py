"""The monitoring role: the exporters on every node, Prometheus and Grafana on the head.

Monitoring (one per node) gets the exporters image to the node (on the head as the stack's
`monitoring.image_source` says; every other node from the head over the fabric, as the engine
image travels) and runs node-exporter, the GPU exporter, the RDMA textfile collector and
cAdvisor as rootless containers on the housekeeping cores (sparkrack.plan.exporters).

MonitoringServer (the Prometheus node) writes Prometheus's configuration and rules
(sparkrack.monitoring.prometheus) and runs Prometheus, whose env carries the files' digest so
that a changed configuration restarts it. Grafana's provisioning and dashboards
(sparkrack.monitoring.grafana) are written whether or not Grafana runs: its container runs only
where the stack names a Grafana image and the admin password is set (a Pulumi secret, handed to
Podman as a secret over stdin). Nothing here waits for inference.
"""

from __future__ import annotations

import base64
import posixpath
import re
from dataclasses import dataclass, replace
from pathlib import Path

import pulumi

from roles.common import ROLES, render, ship_from_head, token
from roles.containers import RunAs, container
from sparkrack.monitoring.grafana import grafana_files
from sparkrack.monitoring.prometheus import prometheus_files
from sparkrack.plan import NodePlan, Plan
from sparkrack.plan.exporters import (
    GRAFANA_SECRET,
    PROMETHEUS,
    exporter_containers,
    files_digest,
    grafana,
    prometheus,
)
from sparkrack.resources.engine import ControlImage, Directory
from sparkrack.resources.files import RemoteFile, RemoteFileArgs
from sparkrack.resources.podman import Container, Image, ImageArgs
from sparkrack.resources.podman_secret import PodmanSecret
from sparkrack.resources.units import Unit, UnitArgs
from sparkrack.stackspec.roles import MonitoringRoleSpec
from sparkrack.stackspec.secrets import GRAFANA_PASSWORD_KEY
from sparkrack.transport.target import Target

ROLE = "monitoring"


# What the role builds with `monitoring.image_source: build` (templates/), and the service user's
# Podman API socket, which cAdvisor reads the containers from.
CONTAINERFILES = {"exporters": "Containerfile.exporters", "prometheus": "Containerfile.prometheus"}
PODMAN_SOCKET_UNIT = "podman.socket"


# cAdvisor's sources (a small main over the library module, see tools/cadvisor/ensure-cadvisor).
CADVISOR_SOURCES = ROLES.parent / "tools" / "cadvisor"


def containerfile(kind: str, settings: MonitoringRoleSpec) -> str:
    """The Containerfile `build` uses for `kind` (exporters, prometheus), the sources in it."""
    bases = {"debian_image": settings.debian_image, "golang_image": settings.golang_image}
    embedded = exporters_sources() if kind == "exporters" else {}
    return render(ROLE, CONTAINERFILES[kind], **bases, **embedded)


def exporters_sources() -> dict[str, str]:
    """The collectors and cAdvisor's Go sources, base64-encoded, and cAdvisor's version."""
    files = ROLES / ROLE / "files"
    return {
        "gpu_exporter": base64_of(files / "gpu_exporter.py"),
        "rdma_textfile": base64_of(files / "rdma_textfile.py"),
        "cadvisor_go_mod": base64_of(CADVISOR_SOURCES / "go.mod"),
        "cadvisor_go_sum": base64_of(CADVISOR_SOURCES / "go.sum"),
        "cadvisor_main_go": base64_of(CADVISOR_SOURCES / "main.go"),
        "cadvisor_version": cadvisor_version((CADVISOR_SOURCES / "go.mod").read_text()),
    }


def cadvisor_version(go_mod: str) -> str:
    """The cAdvisor library version go.mod requires: 'v0.53.0'."""
    found = re.search(r"^\s*github\.com/google/cadvisor (v\S+)", go_mod, re.MULTILINE)
    if found is None:
        raise ValueError(f"{CADVISOR_SOURCES / 'go.mod'}: no github.com/google/cadvisor require")
    return found.group(1)


def base64_of(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def origin_image(
    name: str, image: ImageArgs, source: str, kind: str, settings: MonitoringRoleSpec,
    opts: pulumi.ResourceOptions,
) -> Image:  # fmt: skip
    """An image on the head, from where the stack says: this machine, a build, or present."""
    if source == "control":
        return ControlImage(name, image.target, image.user, image.reference, opts=opts)
    built = containerfile(kind, settings) if source == "build" and kind != "grafana" else ""
    return Image(name, replace(image, containerfile=built), opts)


@dataclass(frozen=True)
class MonitoringArgs:
    plan: Plan
    node: NodePlan
    target: Target  # how the program reaches the node
    user: str
    home: str
    head: Monitoring | None = None  # None on the head: its image is the origin of the others'


class Monitoring(pulumi.ComponentResource):
    """One node's exporters. Output: image_id (the exporters image the node runs)."""

    image: Image

    def __init__(
        self, name: str, args: MonitoringArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__(token(ROLE), name, None, opts)
        plan, node, head = args.plan, args.node, args.head
        target, user = args.target, args.user
        self.target, self.user = target, user  # what the other nodes' images ship from
        run_as, child = RunAs(target, user, args.home), pulumi.ResourceOptions(parent=self)
        self.image = self.exporters_image(plan, node, head)
        paths = node.paths.monitoring
        after_image = pulumi.ResourceOptions(parent=self, depends_on=[self.image])
        textfile = Directory(
            f"{node.name}-textfile-dir", target, paths.textfile, user, opts=after_image
        )
        socket_unit = UnitArgs(target, PODMAN_SOCKET_UNIT, scope="user", user=user)
        socket = Unit(f"{node.name}-podman-socket", socket_unit, child)
        self.containers: list[Container] = []
        before: list[pulumi.Resource] = [self.image, textfile, socket]
        for spec in exporter_containers(plan, node, paths):
            started = container(
                spec,
                run_as,
                self.image.image_id,
                pulumi.ResourceOptions(parent=self, depends_on=before),
            )
            self.containers.append(started)
        self.register_outputs({"image_id": self.image.image_id})

    def exporters_image(self, plan: Plan, node: NodePlan, head: Monitoring | None) -> Image:
        """The exporters image: on the head from where the stack says, shipped from there to
        every other node."""
        child, name = pulumi.ResourceOptions(parent=self), f"{node.name}-exporters-image"
        image = ImageArgs(self.target, self.user, plan.monitoring.exporters_image)
        if head is None:
            source = plan.monitoring.image_source
            return origin_image(name, image, source, "exporters", plan.roles.monitoring, child)
        ship = ship_from_head(plan, node, head.image, head.target)
        return Image(name, replace(image, ship_from=ship), child)


@dataclass(frozen=True)
class MonitoringServerArgs:
    plan: Plan
    target: Target  # how the program reaches the Prometheus node
    user: str
    home: str
    grafana_password: pulumi.Input[str] | None = None  # Grafana runs only with one


class MonitoringServer(pulumi.ComponentResource):
    """Prometheus on its node, Grafana's files there, and Grafana where an image is named."""

    def __init__(
        self, name: str, args: MonitoringServerArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__(f"{token(ROLE)}Server", name, None, opts)
        plan, grafana_password = args.plan, args.grafana_password
        node = plan.node(plan.monitoring.prometheus_node)
        target, user = args.target, args.user
        run_as = RunAs(target, user, args.home)
        paths = node.paths.monitoring
        child = pulumi.ResourceOptions(parent=self)
        source = plan.monitoring.image_source
        image = origin_image(
            f"{node.name}-prometheus-image",
            ImageArgs(target, user, plan.monitoring.prometheus_image),
            source,
            "prometheus",
            plan.roles.monitoring,
            child,
        )
        files = prometheus_files(plan)
        # A file put back after a hand edit (and a reload) restarts a running Prometheus: the
        # Plan, and so the container's digest, did not change, and it would keep what it loaded.
        restarts = f"{PROMETHEUS}.service"
        written = self.write(
            node, target, user, paths.prometheus_config, files, "prometheus", restarts
        )
        after_image = pulumi.ResourceOptions(parent=self, depends_on=[image])
        data = Directory(
            f"{node.name}-prometheus-data", target, paths.prometheus_data, user, opts=after_image
        )
        spec = prometheus(plan, node, paths, files_digest(files))
        self.prometheus = container(
            spec,
            run_as,
            image.image_id,
            pulumi.ResourceOptions(parent=self, depends_on=[image, data, *written]),
        )
        dashboards = grafana_files(plan)
        shown = self.write(node, target, user, paths.grafana, dashboards, "grafana")
        if plan.monitoring.grafana_image is not None:
            self.grafana(plan, node, run_as, grafana_password, dashboards, shown)
        self.register_outputs({})

    def write(
        self,
        node: NodePlan,
        target: Target,
        user: str,
        directory: str,
        files: dict[str, str],
        kind: str,
        restarts: str = "",
    ) -> list[RemoteFile]:
        """One RemoteFile per file, named by its path; one after the other, so that the first
        records the directories it made and, deleted last, removes them when they are empty. A
        write restarts the user's unit `restarts` when it runs."""
        written: list[RemoteFile] = []
        for relative in sorted(files):
            slug = relative.replace("/", "-").replace(".", "-")
            file = RemoteFileArgs(
                target,
                posixpath.join(directory, relative),
                files[relative],
                owner=user,
                group=user,
                restarts=restarts,
                restarts_as=user if restarts else "",
            )
            after_first = pulumi.ResourceOptions(parent=self, depends_on=written[:1])
            written.append(RemoteFile(f"{node.name}-{kind}-{slug}", file, after_first))
        return written

    def grafana(
        self,
        plan: Plan,
        node: NodePlan,
        run_as: RunAs,
        password: pulumi.Input[str] | None,
        files: dict[str, str],
        written: list[RemoteFile],
    ) -> None:
        target, user = run_as.target, run_as.user
        if password is None:
            key = GRAFANA_PASSWORD_KEY
            pulumi.log.warn(
                f"stack {plan.stack}, node {node.name}: monitoring.grafana_image is set but "
                f"sparkrack:{key} is not: Grafana is not started (`pulumi config set --secret "
                f"sparkrack:{key} ...`)",
                self,
            )
            return
        child = pulumi.ResourceOptions(parent=self)
        reference = str(plan.monitoring.grafana_image)
        image = origin_image(
            f"{node.name}-grafana-image",
            ImageArgs(target, user, reference),
            plan.monitoring.image_source,
            "grafana",
            plan.roles.monitoring,
            child,
        )
        secret = PodmanSecret(
            f"{node.name}-grafana-admin-password", target, user, GRAFANA_SECRET, password, child
        )
        spec = grafana(plan, node, node.paths.monitoring, files_digest(files))
        container(
            spec,
            run_as,
            image.image_id,
            pulumi.ResourceOptions(parent=self, depends_on=[image, secret, *written]),
        )
