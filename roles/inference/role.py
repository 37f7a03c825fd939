"""The inference role: the engine image, the model directory and a Ray container on every node;
`vllm serve` beside the head's Ray once every node has joined.

Inference (one per node) gets the image to the node: on the head it is built, found or loaded
from this machine as the stack's `serving.image_source` says; every other node gets it from the
head over the fabric. The head's Ray must be up (read with `ray status`, never slept for) before
a worker starts. InferenceServe (the head only) waits for all nodes in `ray status`, runs `vllm
serve`, and waits for the OpenAI API to list the model.
"""

from __future__ import annotations

import ipaddress
import posixpath

import pulumi

from roles.common import ROLES, defaults, token
from sparkrack.plan import NodePlan, Plan
from sparkrack.plan.engine import HEAD_CONTAINER, EngineContainer, api_container, ray_container
from sparkrack.resources.engine import ControlImage, Directory, RayCluster, ServedModel
from sparkrack.resources.podman import Container, Image, ShipFrom
from sparkrack.ssh import Target

ROLE = "inference"


def fabric_address(origin: NodePlan, node: NodePlan) -> str:
    """`node`'s address on a link it shares with `origin` (shipping goes over the fabric); its
    management address when they share none (DHCP, or no fabric)."""
    networks = [
        ipaddress.ip_interface(link.address).network for link in origin.links if link.address
    ]
    for link in node.links:
        address = ipaddress.ip_interface(link.address).ip if link.address else None
        if address is not None and any(address in network for network in networks):
            return str(address)
    return node.address


def home_path(home: str, path: str) -> str:
    return posixpath.join(home, path)


def engine_container(
    resource: str,
    target: Target,
    user_home: tuple[str, str],
    spec: EngineContainer,
    image: tuple[str, pulumi.Input[str]],
    opts: pulumi.ResourceOptions,
) -> Container:
    (user, home), (reference, image_id) = user_home, image
    return Container(
        resource,
        target,
        user,
        home,
        spec.name,
        reference,
        image_id,
        env=spec.env,
        devices=list(spec.devices),
        ulimits=spec.ulimits,
        cpuset=spec.cpuset,
        command=list(spec.command),
        options=list(spec.options),
        opts=opts,
    )


class Inference(pulumi.ComponentResource):
    """One node's engine. Outputs: image_id; on the head, `head_ready` gates the workers."""

    image: Image
    ray: Container
    head_ready: RayCluster | None

    def __init__(
        self,
        plan: Plan,
        node: NodePlan,
        user_home: tuple[str, str],
        head: Inference | None,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__(token(ROLE), f"{node.name}-{ROLE}", None, opts)
        config, target = defaults(ROLE), Target.for_node(node)
        (user, home), self.head_ready = user_home, None
        child = pulumi.ResourceOptions(parent=self)
        self.image = self.engine_image(plan, node, target, user, head)
        self.model_dir = plan.serving.model_dir or home_path(home, config["model_dir"])
        self.ray_dir = home_path(home, config["ray_dir"])
        # Never deleted with the stack: the weights cost a long download.
        keep = pulumi.ResourceOptions(parent=self, retain_on_delete=True)
        create = plan.serving.model_dir is None
        models = Directory(f"{node.name}-model-dir", target, self.model_dir, user, create, keep)
        after = [self.image, models]
        if node.role == "head":
            after.append(Directory(f"{node.name}-ray-dir", target, self.ray_dir, user, opts=child))
        elif head is not None and head.head_ready is not None:
            after.append(head.head_ready)
        spec = ray_container(plan, node, self.model_dir, self.ray_dir)
        self.ray = engine_container(
            f"{node.name}-{spec.name}",
            target,
            user_home,
            spec,
            (plan.serving.image, self.image.image_id),
            pulumi.ResourceOptions(parent=self, depends_on=after),
        )
        if node.role == "head":
            self.head_ready = RayCluster(
                f"{node.name}-ray-head-ready",
                target,
                user,
                HEAD_CONTAINER,
                1,
                pulumi.ResourceOptions(parent=self, depends_on=[self.ray]),
            )
        self.register_outputs({"image_id": self.image.image_id})

    def engine_image(
        self, plan: Plan, node: NodePlan, target: Target, user: str, head: Inference | None
    ) -> Image:
        child, name, reference = (
            pulumi.ResourceOptions(parent=self),
            f"{node.name}-engine-image",
            plan.serving.image,
        )
        if head is not None:
            origin = plan.node(plan.head_node)
            ship = ShipFrom(
                head.image,
                Target.for_node(origin),
                fabric_address(origin, node),
                defaults("base")["trust_key_name"],
            )
            return Image(name, target, user, reference, ship_from=ship, opts=child)
        if plan.serving.image_source == "control":
            return ControlImage(name, target, user, reference, opts=child)
        containerfile = ""
        if plan.serving.image_source == "build":
            containerfile = (ROLES / ROLE / "files" / defaults(ROLE)["containerfile"]).read_text()
        return Image(name, target, user, reference, containerfile=containerfile, opts=child)


class InferenceServe(pulumi.ComponentResource):
    """`vllm serve` on the head, once Ray has every node; ready when the API lists the model."""

    def __init__(
        self,
        plan: Plan,
        head: Inference,
        user_home: tuple[str, str],
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        node = plan.node(plan.head_node)
        super().__init__(f"{token(ROLE)}Serve", f"{node.name}-{ROLE}-serve", None, opts)
        target, user = Target.for_node(node), user_home[0]
        complete = RayCluster(
            f"{node.name}-ray-cluster",
            target,
            user,
            HEAD_CONTAINER,
            len(plan.nodes),
            pulumi.ResourceOptions(parent=self),
        )
        spec = api_container(plan, head.model_dir, head.ray_dir)
        api = engine_container(
            f"{node.name}-{spec.name}",
            target,
            user_home,
            spec,
            (plan.serving.image, head.image.image_id),
            pulumi.ResourceOptions(parent=self, depends_on=[complete]),
        )
        ServedModel(
            f"{node.name}-served-model",
            target,
            plan.serving.port,
            plan.serving.served_model_name,
            float(defaults(ROLE)["api_ready_timeout_s"]),
            pulumi.ResourceOptions(parent=self, depends_on=[api]),
        )
        self.register_outputs({})
