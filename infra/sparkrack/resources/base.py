"""The plumbing every node resource shares: a dynamic provider that reads the live node.

A subclass names its inputs, which of them are read back from the node (`STATE`), which replace
(`REPLACE`), and implements four small node operations: observe, apply, remove, identity.

Drift shows because `read` returns the live values both as outputs and as *inputs*: the engine
then diffs refreshed inputs against the program's, and names exactly the property that drifted.
`diff` decides only whether anything differs and what must replace; it leaves the property
detail to the engine (the dynamic-provider host cannot pass a detailed diff itself).

Provider classes live in this package, never in `__main__`: state pickles them by import path.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import pulumi
from pulumi.dynamic import (
    CheckFailure,
    CheckResult,
    CreateResult,
    DiffResult,
    ReadResult,
    Resource,
    ResourceProvider,
    UpdateResult,
)
from pulumi.output import Unknown
from pulumi.runtime import rpc

from sparkrack.asking import read_in_refresh
from sparkrack.asking.shared import forget
from sparkrack.transport.target import (
    NODE_UNAVAILABLE,
    NoSuchUser,
    SshError,
    Target,
    Unreachable,
)

Props = Mapping[str, Any]
Live = dict[str, Any]
CONNECTION_KEYS = ("node", "connection")
PULUMI_MODULE = "sparkrack"  # type tokens read pulumi-python:dynamic/sparkrack:<Name>


def holds_unknown(value: Any) -> bool:
    """Whether the engine sent `value`, or anything in it, as not known yet (a preview)."""
    if isinstance(value, dict):
        return any(holds_unknown(item) for item in value.values())
    if isinstance(value, list | tuple):
        return any(holds_unknown(item) for item in value)
    # The dynamic-provider host hands a not-yet-known value over as an Unknown (or the marker).
    return isinstance(value, Unknown) or (isinstance(value, str) and value == rpc.UNKNOWN)


class NodeProvider(ResourceProvider):
    """check/create/read/update/delete/diff over SSH; subclasses supply the node operations."""

    INPUTS: ClassVar[tuple[str, ...]]  # every input but node and connection
    STATE: ClassVar[tuple[str, ...]]  # the inputs a read finds on the node
    REPLACE: ClassVar[tuple[str, ...]]  # inputs whose change makes it another thing
    DERIVED: ClassVar[tuple[str, ...]] = ()  # inputs check() computes (derive)
    OPTIONAL: ClassVar[tuple[str, ...]] = ()  # inputs a resource gives only where it needs them
    SECRET: ClassVar[tuple[str, ...]] = ()  # inputs that may hold a secret, or a hash of one
    # The provider object is a reference to this class: nothing secret is captured in it.
    serialize_as_secret_always = False

    # --- what a subclass implements -----------------------------------------------------------

    def identity(self, props: Props) -> str:
        raise NotImplementedError

    def validate(self, props: Props) -> list[CheckFailure]:
        return []

    def derive(self, props: Props) -> dict[str, Any]:
        """Inputs computed from the others (a content hash): normalised in check, once."""
        return {}

    def observe(self, target: Target, props: Props) -> Live | None:
        """The STATE values on the node now, or None when the thing is absent."""
        raise NotImplementedError

    def apply(self, target: Target, props: Props, live: Live | None) -> dict[str, Any]:
        """Make the node match props; returns extra outputs (what to restore on delete)."""
        raise NotImplementedError

    def remove(self, target: Target, props: Props) -> None:
        raise NotImplementedError

    def undo(self, target: Target, props: Props, before: Live | None) -> None:
        """Take back a create that failed halfway, so the node is as `before` (best effort)."""

    # --- the provider protocol ------------------------------------------------------------------

    def check(self, _olds: dict[str, Any], news: dict[str, Any]) -> CheckResult:
        failures = [
            CheckFailure(key, "required")
            for key in (*CONNECTION_KEYS, *self.INPUTS)
            if key not in news and key not in (*self.DERIVED, *self.OPTIONAL)
        ]
        if failures:
            return CheckResult(news, failures)
        if holds_unknown(news):
            # A preview before an input exists (the files a download will fetch): judged, and
            # derived from, at the update that has it. Read as values, it would be nonsense.
            return CheckResult(news, [])
        failures = self.validate(news)
        return CheckResult(news if failures else {**news, **self.derive(news)}, failures)

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        # olds are the stored outputs: after a refresh, the live values read() found.
        if UNREACHABLE in olds.get("connection", {}):
            # This run's refresh could not use the node: nothing is known of it, nothing is
            # planned for it, and the program reports it once (resources.availability).
            return DiffResult(changes=False)
        if news.get("connection", {}).get(STANDING):
            # A resource of the whole rack while one of its nodes does not answer (target.Target):
            # it waits for nothing and changes nothing until the rack is whole again.
            return DiffResult(changes=False)
        changed = [
            key for key in (*CONNECTION_KEYS, *self.INPUTS) if olds.get(key) != news.get(key)
        ]
        if not changed:
            return DiffResult(changes=False)
        replaces = [key for key in changed if key in (*self.REPLACE, "node")]
        # changes=None: the engine diffs old and new inputs and so names each changed property.
        return DiffResult(changes=None, replaces=replaces or None, delete_before_replace=True)

    def create(self, props: dict[str, Any]) -> CreateResult:
        # A failed create must leave nothing behind: the engine will not record it, and the
        # next create would take our half-applied state for the node's original one.
        target = target_of(props)
        before = self.observe(target, props)
        try:
            extra = self.apply(target, props, before)
            return CreateResult(self.node_id(props), self.converged(target, props, extra))
        except Exception:
            with contextlib.suppress(Exception):  # the original error is the one to report
                self.undo(target, props, before)
            raise
        finally:
            forget(target.node)  # nothing a refresh kept of the node answers after a change

    def read(self, id_: str, props: dict[str, Any]) -> ReadResult:
        target = target_of(props)
        inputs = {key: props[key] for key in (*CONNECTION_KEYS, *self.INPUTS) if key in props}
        inputs["connection"] = reachable(props["connection"])
        try:
            live = read_in_refresh(
                id_,
                props,
                self.SECRET,
                lambda: self.observe(target, props),
                recordable=UNREACHABLE not in props["connection"],
            )
        except NODE_UNAVAILABLE as error:
            return self.unread(id_, props, inputs, error)
        except NoSuchUser:
            live = None  # its owner's account is gone (a re-imaged node): so is it
        if live is None:
            return ReadResult("", {})  # gone from the node: the engine plans to create it again
        inputs.update({key: live[key] for key in self.STATE})  # only inputs: not uid, load_state
        # The outputs lose an earlier run's mark too: `diff` reads them, and a node back must be
        # planned for again.
        return ReadResult(id_, {**props, **live, "connection": inputs["connection"]}, inputs=inputs)

    def unread(
        self, id_: str, props: dict[str, Any], inputs: dict[str, Any], error: SshError
    ) -> ReadResult:
        """A node that cannot be used (no answer, a host key not pinned) must not fail the whole
        refresh, or `refresh: always` would stop every other node too. What state knows is kept,
        and the connection is marked with the error: `diff` then plans nothing for it, while
        the other nodes proceed (the program says why, once: resources.availability)."""
        marked = {**inputs["connection"], UNREACHABLE: str(error)}
        return ReadResult(
            id_, {**props, "connection": marked}, inputs={**inputs, "connection": marked}
        )

    def update(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        target = target_of(news)
        try:
            extra = self.apply(target, news, self.observe(target, news))
            return UpdateResult(self.converged(target, news, {**extra, **restore_outputs(olds)}))
        finally:
            forget(target.node)  # nothing a refresh kept of the node answers after a change

    def delete(self, _id: str, props: dict[str, Any]) -> None:
        target = target_of(props)
        try:
            self.remove(target, props)
        except Unreachable as error:
            # A node that does not answer cannot be cleaned, and a delete that failed on it
            # would hold the stack (a dead box could leave only by `pulumi state delete`): what
            # state knows of it goes, what is on it stays, and that is said once per node.
            dropped_unanswered(target, error)
        finally:
            forget(target.node)  # what a refresh kept of the node may be gone with it

    # --- shared steps ---------------------------------------------------------------------------

    def node_id(self, props: Props) -> str:
        return f"{props['node']}:{self.identity(props)}"

    def converged(self, target: Target, props: Props, extra: dict[str, Any]) -> dict[str, Any]:
        """Read back after applying: outputs are what the node reports, never what we hoped."""
        live = self.observe(target, props)
        if live is None:
            raise SshError(f"{target.where()}: {self.identity(props)} still absent after apply")
        wrong = [key for key in self.STATE if live.get(key) != props.get(key)]
        if wrong:
            found = ", ".join(f"{key}={live[key]!r} (want {props.get(key)!r})" for key in wrong)
            raise SshError(f"{target.where()}: {self.identity(props)} applied but reads {found}")
        return {**props, **live, **extra}


def warn(message: str) -> None:
    """A warning in `pulumi up`'s output: a dynamic provider runs apart from the engine, which
    shows what it writes to stderr (pulumi.log does no more there)."""
    say(f"warning: {message}")


def say(message: str) -> None:
    """A line in `pulumi up`'s output, from a dynamic provider (see warn)."""
    print(message, file=sys.stderr, flush=True)


_DROPPED_NODES: set[str] = set()  # the nodes this provider process has said it dropped


def dropped_unanswered(target: Target, error: Unreachable) -> None:
    if target.node not in _DROPPED_NODES:
        _DROPPED_NODES.add(target.node)
        warn(
            f"{error}: its resources are dropped from the stack's state; whatever sparkrack put "
            "on it stays there"
        )


def target_of(props: Props) -> Target:
    return Target.from_props(str(props["node"]), props["connection"])


UNREACHABLE = "unreachable"  # the mark a failed read leaves on the stored connection
STANDING = "standing"  # the program's mark: the rack is not whole this run (target.Target)


def reachable(connection: Mapping[str, Any]) -> dict[str, Any]:
    """The connection as the program declares it when the rack is whole: without a mark an
    earlier read or run left."""
    return {key: value for key, value in connection.items() if key not in (UNREACHABLE, STANDING)}


def restore_outputs(olds: Props) -> dict[str, Any]:
    """What create recorded to restore on delete survives every update."""
    return {key: olds[key] for key in ("restore",) if key in olds}


class NodeResource(Resource):
    """A dynamic resource on one node: its inputs always carry the node and how to reach it."""

    def __init__(
        self,
        provider: NodeProvider,
        name: str,
        target: Target,
        props: dict[str, Any],
        opts: pulumi.ResourceOptions | None = None,
        secret_outputs: Sequence[str] = (),
    ) -> None:
        inputs = {"node": target.node, "connection": target.connection_props(), **props}
        if not set(secret_outputs) <= set(provider.SECRET):  # read_once writes the others down
            raise TypeError(f"{type(provider).__name__}.SECRET lacks {list(secret_outputs)}")
        if secret_outputs:
            secrets = pulumi.ResourceOptions(additional_secret_outputs=list(secret_outputs))
            opts = pulumi.ResourceOptions.merge(opts, secrets)
        super().__init__(provider, name, inputs, opts)
