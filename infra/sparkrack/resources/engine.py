"""What the inference role needs beyond Image and Container: an image loaded from the machine
running Pulumi, a directory that outlives the stack, and a Ray cluster's readiness.

ControlImage is an Image whose origin is this machine's own Podman (`podman save` here, piped over
SSH into the head's `podman load`): the simulated nodes reach no registry, and a stack may say
its image comes from here. Read reports the id the head has; a head whose image differs from
this machine's shows as drift.

RayCluster asks the GCS in the head's Ray container (facts.ray): ready when at least `nodes` nodes
are alive; ServedModel, when the OpenAI API lists the model. Their create polls until then (a
worker joins when its raylet has registered, vLLM serves when the weights are loaded: as long as
it takes, never slept for), and a refresh that finds otherwise shows as drift.
"""

from __future__ import annotations

import shlex
import time
from dataclasses import dataclass
from typing import Any, ClassVar

import pulumi
from pulumi.dynamic import CheckFailure, UpdateResult

from sparkrack.asking import gather
from sparkrack.asking.shared import forget
from sparkrack.facts.files import owner
from sparkrack.facts.ray import AliveNodes, alive_nodes
from sparkrack.facts.units import systemctl
from sparkrack.resources.base import (
    PULUMI_MODULE,
    Live,
    NodeProvider,
    NodeResource,
    Props,
    say,
    target_of,
)
from sparkrack.resources.control_load import load_from_control, local_image_id
from sparkrack.resources.engine_reads import drain, health_status, served_models
from sparkrack.resources.podman import Image, OriginImageProvider, podman
from sparkrack.resources.units import on_the_bus
from sparkrack.transport import ssh
from sparkrack.transport.target import SshError, Target

RAY_READY_TIMEOUT_S = 300.0
READY_POLL_S = 2.0
# The API is asked this often while it comes back after a rollout: the downtime `up` prints is
# at most this much longer than the one a client saw.
SERVED_POLL_S = 0.5


class ControlImageProvider(OriginImageProvider):
    """The image on the head, loaded from this machine until the ids match."""

    INPUTS: ClassVar[tuple[str, ...]] = ("user", "reference", "image_id", "keep")
    STATE: ClassVar[tuple[str, ...]] = ("image_id",)
    REPLACE: ClassVar[tuple[str, ...]] = ("user", "reference")
    DERIVED: ClassVar[tuple[str, ...]] = ("image_id", "keep")

    def validate(self, props: Props) -> list[CheckFailure]:
        if not self.local_id(str(props["reference"])):
            message = (
                f"{props['reference']} is not in this machine's Podman (image_source: control)"
            )
            return [CheckFailure("reference", message)]
        return []

    def derive(self, props: Props) -> dict[str, Any]:
        return {"image_id": self.local_id(str(props["reference"]))}

    def local_id(self, reference: str) -> str:
        """This machine's id for `reference`, asked of its Podman once: validate and derive both
        need it, and the host keeps one provider object per process, so every check of a run
        shares the answer (this machine's images do not change while the engine runs)."""
        known: dict[str, str] = self.__dict__.setdefault("_local_ids", {})
        if reference not in known:
            known[reference] = local_image_id(reference)
        return known[reference]

    def apply(self, target: Target, props: Props, live: Live | None) -> dict[str, Any]:
        if live is None or live["image_id"] != props["image_id"]:
            load_from_control(target, str(props["user"]), str(props["reference"]))
        return {"restore": {"had_image": live is not None}}


class ControlImage(Image, module=PULUMI_MODULE, name="ControlImage"):
    """An image on one node (the head), loaded from this machine's Podman. Output: image_id."""

    def __init__(
        self,
        name: str,
        target: Target,
        user: str,
        reference: str,
        keep: bool = False,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        props: dict[str, Any] = {"user": user, "reference": reference, "image_id": None}
        if keep:
            props["keep"] = True
        NodeResource.__init__(self, ControlImageProvider(), name, target, props, opts)


# --- Directory --------------------------------------------------------------------------------


class DirectoryProvider(NodeProvider):
    """A directory owned by a user. `create: false` requires it to be there already."""

    INPUTS: ClassVar[tuple[str, ...]] = ("path", "owner", "create")
    STATE: ClassVar[tuple[str, ...]] = ("owner",)
    REPLACE: ClassVar[tuple[str, ...]] = ("path",)

    def identity(self, props: Props) -> str:
        return f"directory {props['path']}"

    def observe(self, target: Target, props: Props) -> Live | None:
        found = gather(target, owner(str(props["path"])))
        return {"owner": found} if found else None

    def apply(self, target: Target, props: Props, live: Live | None) -> dict[str, Any]:
        path, owner = shlex.quote(str(props["path"])), shlex.quote(str(props["owner"]))
        if live is None and not props["create"]:
            raise SshError(f"{target.where()}: {self.identity(props)} is not there")
        if live is None:
            # As the owner where it can: parents made by root (a user's ~/.local/share) would
            # lock its Podman out of its own storage; elsewhere (/data) root makes them.
            script = f"runuser -u {owner} -- mkdir -p -- {path} 2>/dev/null || "
            script += f"install -d -o {owner} -g {owner} -m 0755 {path}"
            ssh.run(target, script, sudo=True)
        elif live["owner"] != props["owner"]:
            ssh.run(target, f"chown {owner}: {path}", sudo=True)
        return {}

    def remove(self, target: Target, props: Props) -> None:
        if props["create"]:  # never what the stack only pointed at
            ssh.run(target, f"rm -rf -- {shlex.quote(str(props['path']))}", sudo=True)


class Directory(NodeResource, module=PULUMI_MODULE, name="Directory"):
    """A directory on one node owned by `owner`. Output: owner."""

    def __init__(
        self,
        name: str,
        target: Target,
        path: str,
        owner: str,
        create: bool = True,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        props = {"path": path, "owner": owner, "create": create}
        super().__init__(DirectoryProvider(), name, target, props, opts)


# --- readiness: a Ray cluster, a served model ---------------------------------------------------


class ReadinessProvider(NodeProvider):
    """A condition on the node: create waits for it (polled, never slept for), a refresh reads it
    again, and `ready: false` then shows as drift. Nothing on the node is the resource's own."""

    STATE: ClassVar[tuple[str, ...]] = ("ready",)
    REPLACE: ClassVar[tuple[str, ...]] = ()
    # `after`: the image id of the container the condition is about. When the container moves to
    # another image it restarts, and the changed input makes `up` wait for the condition again
    # instead of returning while the engine is still loading.
    DERIVED: ClassVar[tuple[str, ...]] = ("ready", "after")
    poll_s = READY_POLL_S  # between two readings of a wait

    def reading(self, target: Target, props: Props) -> tuple[bool, str, dict[str, Any]]:
        """(ready, what was seen for an error message, further outputs)."""
        raise NotImplementedError

    def timeout_s(self, props: Props) -> float:
        raise NotImplementedError

    def derive(self, props: Props) -> dict[str, Any]:
        return {"ready": True}

    def observe(self, target: Target, props: Props) -> Live | None:
        ready, _, outputs = self.reading(target, props)
        return {"ready": ready, **outputs}

    def apply(self, target: Target, props: Props, live: Live | None) -> dict[str, Any]:
        deadline = time.monotonic() + self.timeout_s(props)
        while True:
            ready, seen, outputs = self.reading(target, props)
            if ready:
                return {"ready": True, **outputs}
            if time.monotonic() > deadline:
                waited = f"not ready after {self.timeout_s(props):.0f}s"
                raise SshError(f"{target.where()}: {self.identity(props)} {waited}: {seen}")
            self.still_waiting(target, props)
            time.sleep(self.poll_s)

    def still_waiting(self, target: Target, props: Props) -> None:
        """What a wait does between two readings that found the condition false: nothing."""

    def converged(self, target: Target, props: Props, extra: dict[str, Any]) -> dict[str, Any]:
        """The reading that ended the wait is the read-back. Asking again a moment later only
        adds a chance that one query fails on a loaded node (CI: Ray's node query, just after it
        had answered) and fails a create whose condition held."""
        return {**props, **extra}

    def remove(self, target: Target, props: Props) -> None:
        """Nothing to remove."""


class RayClusterProvider(ReadinessProvider):
    INPUTS: ClassVar[tuple[str, ...]] = ("user", "container", "nodes", "ready", "after")

    def identity(self, props: Props) -> str:
        return f"Ray cluster of {props['nodes']} nodes in {props['container']}"

    def timeout_s(self, props: Props) -> float:
        return RAY_READY_TIMEOUT_S

    def reading(self, target: Target, props: Props) -> tuple[bool, str, dict[str, Any]]:
        found = self.ask(target, props)
        for _ in range(QUERY_RETRIES):
            if found.addresses is not None:
                break
            time.sleep(READY_POLL_S)
            found = self.ask(target, props)
        alive = found.addresses or ()
        seen = f"{len(alive)} alive {list(alive)}; query said: {found.error[-400:]}"
        return len(alive) >= int(props["nodes"]), seen, {"active_nodes": len(alive)}

    def ask(self, target: Target, props: Props) -> AliveNodes:
        query = alive_nodes(str(props["container"])).as_user(str(props["user"]))
        try:
            return gather(target, query)
        except ValueError as error:  # Ray printed something else: not ready yet
            return AliveNodes(None, str(error))


# The node query is a short Ray driver: on a loaded node its start now and then fails while the
# cluster is fine (CI: a refresh read a healthy head as not ready). A failed query is asked again
# before it counts as a reading; a cluster short of nodes is a reading at once.
QUERY_RETRIES = 2


@dataclass(frozen=True)
class RayClusterArgs:
    """At least `nodes` Ray nodes alive, asked in `user`'s Ray `container`; `after`: what the
    wait is about (a container's image), whose change makes `up` wait again."""

    target: Target
    user: str
    container: str
    nodes: int
    after: pulumi.Input[str] | None = None


class RayCluster(NodeResource, module=PULUMI_MODULE, name="RayCluster"):
    """At least `nodes` Ray nodes alive in the GCS, read in the head's Ray container.
    Output: active_nodes."""

    active_nodes: pulumi.Output[int]

    def __init__(
        self, name: str, args: RayClusterArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        props = {"user": args.user, "container": args.container, "nodes": args.nodes}
        props |= {"after": args.after, "ready": None, "active_nodes": None}
        super().__init__(RayClusterProvider(), name, args.target, props, opts)


class ServedModelProvider(ReadinessProvider):
    INPUTS: ClassVar[tuple[str, ...]] = (
        "user", "container", "port", "key_secret", "model", "timeout_s", "ready", "after",
        "stopped_at",
    )  # fmt: skip
    DERIVED: ClassVar[tuple[str, ...]] = ("ready", "after", "stopped_at")
    # A stack without sparkrack:apiKey gives none, and the engine drops a None input.
    OPTIONAL: ClassVar[tuple[str, ...]] = ("key_secret",)
    poll_s = SERVED_POLL_S

    def still_waiting(self, target: Target, props: Props) -> None:
        """An engine that has loaded its model (its startup probe passed) and does not answer
        is hung: killed and restarted now, rather than waited on until its health check does
        it. One still loading (`starting`), or answering at all, is waited for."""
        user, name = str(props["user"]), str(props["container"])
        if health_status(target, user, name) not in ("healthy", "unhealthy"):
            return
        if served_models(target, props):
            return  # it answers (another list, or just now): not a hang
        ssh.run(target, podman(user, "kill", "--signal", "KILL", name), check=False)
        restart = systemctl("user", user, "restart", f"{name}.service")
        on_the_bus(lambda: ssh.run(target, restart, sudo=True))
        say(f"{target.where()}: {name} had loaded and did not answer: killed and restarted")

    def identity(self, props: Props) -> str:
        return f"model {props['model']} on port {props['port']}"

    def timeout_s(self, props: Props) -> float:
        return float(props["timeout_s"])

    def reading(self, target: Target, props: Props) -> tuple[bool, str, dict[str, Any]]:
        served = served_models(target, props)
        return props["model"] in served, f"/v1/models lists {list(served)}", {}

    def update(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        """Waits as create does; after a rollout (a new `stopped_at`), says how long nothing
        served: from the drain's SIGTERM, when vLLM stopped admitting, to the model listed."""
        stopped = float(news.get("stopped_at") or 0.0)
        rolled_out = bool(stopped) and stopped != olds.get("stopped_at")
        try:
            result = super().update(_id, olds, news)
        except SshError as error:
            if rolled_out:
                raise SshError(f"{error}; nothing serves since the rollout's drain") from None
            raise
        downtime = olds.get("downtime_s")  # the last rollout's, kept until the next
        if rolled_out:
            downtime = round(time.time() - stopped, 1)
            say(f"{target_of(news).where()}: {news['model']} serves again: {downtime} s down")
        result.outs = {**(result.outs or {}), "downtime_s": downtime}
        return result


@dataclass(frozen=True)
class ServedModelArgs:
    """The API on `port` listing `model` within `timeout_s`; `container`: the engine's, of
    `user`, restarted when it hangs. `after` and `stopped_at` as ServedModel says; `key_secret`:
    the Podman secret of the API's key (None: no key)."""

    target: Target
    user: str
    container: str
    port: int
    model: str
    timeout_s: float
    after: pulumi.Input[str] | None = None
    stopped_at: pulumi.Input[float] = 0.0
    key_secret: str | None = None


class ServedModel(NodeResource, module=PULUMI_MODULE, name="ServedModel"):
    """The OpenAI API on the node answering `/v1/models` with `model`; the engine's container
    restarted when it has loaded and does not answer. `stopped_at`: when the rollout that
    restarted the engine drained it (EngineRollout); `key_secret`: the Podman secret of the
    API's key, sent with each ask. Output: downtime_s, the last rollout's."""

    downtime_s: pulumi.Output[float | None]

    def __init__(
        self, name: str, args: ServedModelArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        props = {"user": args.user, "container": args.container, "port": args.port}
        props |= {"model": args.model, "key_secret": args.key_secret}
        props |= {"timeout_s": args.timeout_s, "ready": None, "after": args.after}
        props |= {"stopped_at": args.stopped_at, "downtime_s": None}
        super().__init__(ServedModelProvider(), name, args.target, props, opts)


# --- a rollout of the engine ------------------------------------------------------------------


class EngineRolloutProvider(NodeProvider):
    """Before any engine container restarts for a change, the serving vLLM is drained: stopped
    by its unit, whose SIGTERM makes vLLM admit nothing new and finish what is in flight for up
    to its --shutdown-timeout. Only an update drains (a new `generation`): the first `up` has
    nothing serving. Nothing on the node is the resource's own."""

    INPUTS: ClassVar[tuple[str, ...]] = ("user", "unit", "metrics_url", "generation")
    STATE: ClassVar[tuple[str, ...]] = ()
    REPLACE: ClassVar[tuple[str, ...]] = ()

    def identity(self, props: Props) -> str:
        return f"engine rollout ({props['unit']})"

    def observe(self, target: Target, props: Props) -> Live | None:
        return {}

    def apply(self, target: Target, props: Props, live: Live | None) -> dict[str, Any]:
        # 0, not None: a preview takes an output missing from state (as a None is) as unknown,
        # and the served model that reads it would show a change at every preview.
        return {"stopped_at": 0.0}

    def converged(self, target: Target, props: Props, extra: dict[str, Any]) -> dict[str, Any]:
        return {**props, **extra}

    def update(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        target = target_of(news)
        try:
            return UpdateResult({**news, **drain(target, news)})
        finally:
            forget(target.node)

    def remove(self, target: Target, props: Props) -> None:
        """Nothing to remove: a destroy stops the engine through its Container."""


@dataclass(frozen=True)
class EngineRolloutArgs:
    """The engine's `unit` of `user`, drained when `generation` changes; its requests in flight
    read at `metrics_url`."""

    target: Target
    user: str
    unit: str
    metrics_url: str
    generation: pulumi.Input[str]


class EngineRollout(NodeResource, module=PULUMI_MODULE, name="EngineRollout"):
    """The engine on the head drained before a change restarts it. Output: stopped_at (Unix
    time of the drain's SIGTERM; 0 until a rollout drained it)."""

    stopped_at: pulumi.Output[float]
    generation: pulumi.Output[str]

    def __init__(
        self, name: str, args: EngineRolloutArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        props: dict[str, Any] = {"user": args.user, "unit": args.unit}
        props |= {"metrics_url": args.metrics_url, "generation": args.generation}
        props["stopped_at"] = 0.0
        super().__init__(EngineRolloutProvider(), name, args.target, props, opts)
