"""The e2e program for Image and Container: an image built on the head from a Containerfile,
shipped to the other nodes with the head's own key (base role), and run by each node's service
user as a Quadlet unit with the Plan's ulimits and cpuset.

Config (namespace `e2e`): nodes (JSON list of {name, address, ship_to}), head, user (the
SSH login), serviceUser and home (the service user's, made by the roles beforehand),
keyPath, knownHosts, base (an image present on the head), trustKey (the base role's key name),
quoting (text for the container's env and command that unit files must carry unchanged).
"""

from __future__ import annotations

import json

import pulumi

from sparkrack.resources.podman import Container, ContainerArgs, Image, ImageArgs, ShipFrom
from sparkrack.transport.target import Target

config = pulumi.Config("e2e")
nodes = json.loads(config.require("nodes"))
head = config.require("head")
# The owner's login (SSH) and the service user the roles made, whose Podman runs the containers.
login, user, home = config.require("user"), config.require("serviceUser"), config.require("home")
REFERENCE = "localhost/sparkrack/e2e-app:1"
# Text that systemd and Quadlet would read otherwise if written raw (quotes, `%` specifiers, `$`
# expansion, `;`, `#`): the env and the command must reach the container as the test gave it.
QUOTING = config.require("quoting")
# The script writes its argument where the test reads it; `%s` and `$0` are themselves at risk.
SCRIPT = 'printf %s "$0" > /arg0; exec /bin/busybox sleep 2147483647'  # no /tmp in the image
COMMAND = ["/bin/busybox", "sh", "-c", SCRIPT, QUOTING]
CONTAINERFILE = f"FROM {config.require('base')}\nENV SPARKRACK_E2E_IMAGE=1\n"


def target(node: dict[str, str]) -> Target:
    return Target(
        node=node["name"],
        host=node["address"],
        port=22,
        user=login,
        key_path=config.require("keyPath"),
        known_hosts=config.require("knownHosts"),
    )


head_node = next(node for node in nodes if node["name"] == head)
origin_args = ImageArgs(target(head_node), user, REFERENCE, containerfile=CONTAINERFILE)
origin = Image(f"{head}-image", origin_args)
for node in nodes:
    if node["name"] == head:
        image = origin
    else:
        ship = ShipFrom(origin, target(head_node), node["ship_to"], config.require("trustKey"))
        shipped = ImageArgs(target(node), user, REFERENCE, ship_from=ship)
        image = Image(f"{node['name']}-image", shipped)
    app = ContainerArgs(
        target(node),
        user,
        home,
        "e2e-app",
        REFERENCE,
        image.image_id,
        env={"SPARKRACK_NODE": node["name"], "SPARKRACK_QUOTING": QUOTING},
        ulimits={"memlock": "8388608:8388608"},
        cpuset="1",
        command=COMMAND,
        restart="no",  # a removed container must show as drift, not come back by itself
    )
    Container(f"{node['name']}-container", app)
