"""A planned container as a Container resource: the one way every role runs one."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi

from sparkrack.plan.containers import ContainerPlan
from sparkrack.resources.podman import Container, ContainerArgs
from sparkrack.transport.target import Target


@dataclass(frozen=True)
class RunAs:
    """Where a role runs its containers: the node, as the program reaches it, and the service
    user, whose home holds their units."""

    target: Target
    user: str
    home: str


def container(
    spec: ContainerPlan,
    run_as: RunAs,
    image_id: pulumi.Input[str],
    opts: pulumi.ResourceOptions,
    rollout: pulumi.Input[str] | None = None,
) -> Container:
    """`spec` run on the node as the service user; named `<node>-<container>` in the stack."""
    args = ContainerArgs(
        target=run_as.target,
        user=run_as.user,
        home=run_as.home,
        name=spec.name,
        image=spec.image,
        image_id=image_id,
        env=spec.env,
        devices=spec.devices,
        ulimits=spec.ulimits,
        cpuset=spec.cpuset.kernel(),
        command=spec.command,
        restart=spec.restart,
        options=spec.options,
        part_of=spec.part_of,
        stop_timeout_s=spec.stop_timeout_s,
        rollout=rollout,
    )
    return Container(f"{run_as.target.node}-{spec.name}", args, opts)
