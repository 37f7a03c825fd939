"""What the engine's resources read and do on the head beyond Podman's own: the API's health and
the models it lists (ServedModel), and the drain that stops it before a rollout (EngineRollout)."""

from __future__ import annotations

import time
from typing import Any

from sparkrack.asking import gather
from sparkrack.facts import http as facts_http
from sparkrack.facts import podman as podman_facts
from sparkrack.facts.units import systemctl
from sparkrack.resources.base import Props, say
from sparkrack.resources.podman_reads import read_as
from sparkrack.resources.units import on_the_bus
from sparkrack.text.addresses import http_url
from sparkrack.transport import ssh
from sparkrack.transport.target import Target


def health_status(target: Target, user: str, name: str) -> str:
    """Podman's health of the container: `starting` until its startup probe passes, then
    `healthy` or `unhealthy`; '' without a container or a check."""
    record = read_as(target, user, podman_facts.container(name)) or {}
    return str(((record.get("State") or {}).get("Health") or {}).get("Status") or "")


def served_models(target: Target, props: Props) -> tuple[str, ...]:
    """The model ids the OpenAI API on the node serves, () while it does not answer (or answers
    garbage, as a server still starting may): asked on the node's management address, the only
    one it listens on, by the service user with the API's key when it asks for one."""
    url = http_url(target.host, int(props["port"]), "/v1/models")
    key_secret = props.get("key_secret") or None
    fact = facts_http.served_models(url, key_secret)
    try:
        found = gather(target, fact.as_user(str(props["user"])) if key_secret else fact)
    except ValueError:
        return ()
    return found or ()


# systemd bounds the stop itself (the container's TimeoutStopSec); this only keeps SSH from
# waiting forever on a node that stopped answering mid-stop.
DRAIN_STOP_TIMEOUT_S = 3600 + 120


def drain(target: Target, props: Props) -> dict[str, Any]:
    """Stop the engine's unit, which drains it; what it held and how long it took, said."""
    user, unit = str(props["user"]), str(props["unit"])
    in_flight = gather(target, facts_http.requests_in_flight(str(props["metrics_url"])))
    stopped_at = time.time()
    stop = systemctl("user", user, "stop", unit)
    on_the_bus(lambda: ssh.run(target, stop, sudo=True, timeout=DRAIN_STOP_TIMEOUT_S))
    took = round(time.time() - stopped_at, 1)
    held = "was not serving" if in_flight is None else f"drained {in_flight} requests in flight"
    say(f"{target.where()}: engine stopped for the rollout: {held} in {took} s")
    return {"stopped_at": stopped_at, "in_flight": in_flight or 0, "drain_s": took}
