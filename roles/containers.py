"""A planned container as a Container resource: the one way every role runs one."""

from __future__ import annotations

import pulumi

from sparkrack.plan.containers import ContainerPlan
from sparkrack.resources.podman import Container
from sparkrack.transport.target import Target


def container(
    resource: str,
    target: Target,
    user_home: tuple[str, str],
    spec: ContainerPlan,
    image_id: pulumi.Input[str],
    opts: pulumi.ResourceOptions,
    rollout: pulumi.Input[str] | None = None,
) -> Container:
    (user, home) = user_home
    return Container(
        resource,
        target,
        user,
        home,
        spec.name,
        spec.image,
        image_id,
        env=spec.env,
        devices=list(spec.devices),
        ulimits=spec.ulimits,
        cpuset=spec.cpuset,
        command=list(spec.command),
        restart=spec.restart,
        options=list(spec.options),
        part_of=spec.part_of,
        stop_timeout_s=spec.stop_timeout_s,
        rollout=rollout,
        opts=opts,
    )
