"""A planned container as a Container resource: the one way every role runs one."""

from __future__ import annotations

import pulumi

from sparkrack.plan.containers import ContainerPlan
from sparkrack.resources.podman import Container, ContainerArgs
from sparkrack.ssh import Target


def container(
    target: Target,
    user_home: tuple[str, str],
    spec: ContainerPlan,
    image_id: pulumi.Input[str],
    opts: pulumi.ResourceOptions,
    rollout: pulumi.Input[str] | None = None,
) -> Container:
    """`spec` run on the node as the service user; named `<node>-<container>` in the stack."""
    (user, home) = user_home
    args = ContainerArgs(
        target=target,
        user=user,
        home=home,
        name=spec.name,
        image=spec.image,
        image_id=image_id,
        env=spec.env,
        devices=spec.devices,
        ulimits=spec.ulimits,
        cpuset=spec.cpuset,
        command=spec.command,
        restart=spec.restart,
        options=spec.options,
        part_of=spec.part_of,
        stop_timeout_s=spec.stop_timeout_s,
        rollout=rollout,
    )
    return Container(f"{target.node}-{spec.name}", args, opts)
