"""The testinfra suite's wiring: the inventory, the hosts over `ssh://`, and test ids.

The suite is driven by `sparkrack inventory` (or `sparkrack verify`, which writes one): the path
comes from $SPARKRACK_INVENTORY or `--inventory`. Without one there is no cluster to check and the
suite is not collected (a plain `pytest` run of the repository stays offline).

Every parametrized value is a subject naming its node, so each test id reads
`test_link_mtu[spark-2-enp1s0f0np0]` and the table in `sparkrack verify` knows its row.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import testinfra

from sparkrack.verify.checks.subjects import Hosts, roles_of, subject_node, subjects
from sparkrack.verify.inventory import Inventory, ssh_config

INVENTORY_ENV = "SPARKRACK_INVENTORY"
INVENTORY_KEY = pytest.StashKey[Inventory]()

collect_ignore_glob = [] if os.environ.get(INVENTORY_ENV) else ["test_*.py"]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--inventory", help=f"inventory JSON (default: ${INVENTORY_ENV})")


def pytest_configure(config: pytest.Config) -> None:
    path = config.getoption("inventory", default=None) or os.environ.get(INVENTORY_ENV)
    if path:
        config.stash[INVENTORY_KEY] = Inventory.model_validate_json(Path(path).read_text())


def inventory_of(config: pytest.Config) -> Inventory:
    return config.stash[INVENTORY_KEY]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    inventory = inventory_of(metafunc.config)
    for name, values in subjects(inventory).items():
        if name in metafunc.fixturenames:
            metafunc.parametrize(name, values, ids=[value.id for value in values])


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if INVENTORY_KEY not in config.stash:
        return  # not a `sparkrack verify` run: the project's own tests pass through this hook
    unavailable = inventory_of(config).unavailable  # reported once each by `sparkrack verify`
    items[:] = [item for item in items if item_node(item) not in unavailable]
    for item in items:
        node = item_node(item)
        check = getattr(item, "originalname", item.name)
        module = Path(str(item.fspath)).stem.removeprefix("test_")
        item.user_properties += [("node", node), ("check", check), ("category", module)]


def node_of_test_id(nodeid: str, names: list[str]) -> str:
    """The node a test id's subject names (`test_link_mtu[spark-2-enp1s0f0np0]`), else
    "cluster"; `names` longest first, so spark-10 is not read as spark-1."""
    param = nodeid.rsplit("[", 1)[1] if nodeid.endswith("]") else ""
    return next((n for n in names if param == f"{n}]" or param.startswith(f"{n}-")), "cluster")


@pytest.hookimpl(optionalhook=True)  # xdist's hook: absent without pytest-xdist
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """A node's checks on one worker, sharing its SSH master (`sparkrack verify`'s `--dist
    loadgroup`; xdist's own group marks no longer reach its scheduler under pytest 9.2)."""
    if INVENTORY_KEY not in config.stash or config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling  # type: ignore[import-untyped]

    names = sorted((node.name for node in inventory_of(config).nodes), key=len, reverse=True)

    class NodeScheduling(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return node_of_test_id(nodeid, names)

    return NodeScheduling(config, log)


def item_node(item: pytest.Item) -> str:
    callspec = getattr(item, "callspec", None)
    return subject_node(callspec.params.values() if callspec else ()) or "cluster"


def pytest_runtest_setup(item: pytest.Item) -> None:
    inventory = inventory_of(item.config)
    roles = roles_of(getattr(item, "function", None), getattr(item, "module", None))
    missing = [role for role in roles if role not in inventory.roles]
    if missing:
        deployed = ", ".join(inventory.roles) or "none"
        pytest.skip(f"role {missing[0]} is not deployed (deployed: {deployed})")
    if "monitoring" in roles and not inventory.plan.monitoring.enabled:
        pytest.skip("monitoring is disabled in the stack")


@pytest.fixture(scope="session")
def inventory(request: pytest.FixtureRequest) -> Inventory:
    return inventory_of(request.config)


@pytest.fixture(scope="session")
def hosts(inventory: Inventory) -> Iterator[Hosts]:
    # A short path: the ControlPath socket name must fit in sun_path.
    with tempfile.TemporaryDirectory(prefix="sparkrack-verify-") as directory:
        config = Path(directory) / "ssh_config"
        config.write_text(ssh_config(inventory, Path(directory)))

        def connect(name: str) -> Any:
            return testinfra.get_host(f"ssh://{name}", ssh_config=str(config))

        yield Hosts(connect, inventory.unavailable)


@pytest.fixture
def host(request: pytest.FixtureRequest, hosts: Hosts) -> Any:
    """The node the test's subject lives on (testinfra's own `host`, one per subject)."""
    node = subject_node(request.node.callspec.params.values())
    assert node is not None, f"{request.node.name} has no subject naming a node"
    return hosts[node]
