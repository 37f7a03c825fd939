"""The inference role without a node: where images ship to, what the containers' units say, how
drift in the env is read, the stack's image source, and what verification expects."""

from __future__ import annotations

import time
from typing import Any, cast

import pytest

from roles.base.role import reachable_addresses
from roles.common import fabric_reach, ship_from_head
from sparkrack.config.load import load_stack_file
from sparkrack.facts.ray import AliveNodes
from sparkrack.plan import make_plan
from sparkrack.plan.engine import api_container, ray_container
from sparkrack.resources import engine as engine_resources
from sparkrack.resources.container_unit import quadlet_unit, run_unit
from sparkrack.resources.engine import ControlImageProvider, RayClusterProvider
from sparkrack.resources.podman import Image
from sparkrack.resources.podman_reads import declared_env, unit_outcome
from sparkrack.transport import ssh
from sparkrack.transport.target import Result, Target
from sparkrack.verify.checks.subjects import subjects
from sparkrack.verify.inventory import build_inventory
from tests.unit.support import cluster, plan_of, refusal

pytestmark = pytest.mark.unit


def test_images_ship_over_the_fabric_link_to_the_head() -> None:
    plan = make_plan(load_stack_file("sim-2"))
    head, worker = plan.node("spark-1"), plan.node("spark-2")
    reach = fabric_reach(head, worker)
    assert reach.address != worker.address  # not the management network
    assert reach.address.startswith("198.19.")
    assert reach.lease_netdev is None


def test_without_a_shared_link_images_ship_to_the_management_address() -> None:
    plan = make_plan(load_stack_file("sim-2"))
    head, worker = plan.node("spark-1"), plan.node("spark-2")
    alone = worker.model_copy(update={"links": ()})
    assert fabric_reach(head, alone).address == worker.address


def test_on_a_dhcp_rail_images_ship_to_the_lease_the_node_holds_when_shipping() -> None:
    plan = make_plan(load_stack_file("sim-16"))
    head, worker = plan.node(plan.head_node), plan.node("spark-02")
    reach = fabric_reach(head, worker)
    assert reach.address == ""
    assert reach.lease_netdev == worker.links[0].netdev
    from_head = Target.for_node(head)
    ship = ship_from_head(plan, worker, cast(Image, object()), from_head).props()
    assert (ship["to"], ship["to_lease"]) == ("", worker.links[0].netdev)
    # the head pins the worker's host key under its name too, which is what the copy checks
    assert reachable_addresses(plan, worker) == [worker.address, worker.name]


def container_props(**changes: Any) -> dict[str, Any]:
    plan = make_plan(load_stack_file("sim-2"))
    spec = ray_container(plan, plan.node("spark-2"), "/m", "/r")
    props = {
        "name": spec.name,
        "image": plan.serving.image,
        "env": spec.env,
        "devices": list(spec.devices),
        "ulimits": spec.ulimits,
        "cpuset": spec.cpuset.kernel(),  # as roles/containers.py gives it
        "command": list(spec.command),
        "restart": "on-failure",
        "options": list(spec.options),
    }
    return props | changes


def test_units_carry_the_devices_memlock_shm_and_mounts() -> None:
    unit = run_unit(container_props())
    for expected in (
        "--device=/dev/infiniband",
        "--ulimit=memlock=8388608:8388608",  # what gb10-sim declares it can grant
        "--shm-size=17179869184b",
        "--volume=/m:/root/.cache/huggingface",
        "--node-ip-address=198.18.0.12",
        "--num-gpus=1",
    ):
        assert expected in unit
    assert "CPUAffinity=1" in unit
    assert "PodmanArgs=--volume=/m:/root/.cache/huggingface" in quadlet_unit(container_props())


def test_a_container_made_without_options_has_the_same_unit_as_before() -> None:
    without = container_props()
    del without["options"]
    assert "--shm-size" not in run_unit(without)
    assert run_unit(without) == run_unit(container_props(options=[]))


def test_the_api_lives_with_its_heads_ray_and_nothing_else_with_another() -> None:
    """A driver whose Ray head restarted holds a dead cluster: systemd restarts it with the head
    (PartOf), and starts it after (After); the Ray containers stand alone."""
    plan = make_plan(load_stack_file("sim-2"))
    api = api_container(plan, "/m", "/r", "/l/engine.log")
    assert api.part_of == "ray-head"
    props = container_props(name=api.name, part_of=api.part_of)
    for unit in (run_unit(props), quadlet_unit(props)):
        section = unit.split("[Unit]", 1)[1].split("\n\n", 1)[0]
        assert "PartOf=ray-head.service" in section and "After=ray-head.service" in section
    for node in plan.nodes:
        assert ray_container(plan, node, "/m", "/r").part_of == ""
    assert "PartOf" not in run_unit(container_props()) + quadlet_unit(container_props())


def test_nccl_ib_disable_is_read_even_when_not_declared() -> None:
    inspected = {"Config": {"Env": ["PATH=/bin", "NCCL_IB_HCA=x", "NCCL_IB_DISABLE=1"]}}
    assert declared_env(inspected, ["NCCL_IB_HCA"]) == {"NCCL_IB_HCA": "x", "NCCL_IB_DISABLE": "1"}
    assert declared_env({"Config": {"Env": ["NCCL_IB_HCA=x"]}}, ["NCCL_IB_HCA"]) == {
        "NCCL_IB_HCA": "x"
    }


def test_a_control_image_missing_here_is_refused_at_check() -> None:
    props = {"user": "sparkrack", "reference": "localhost/sparkrack/no-such-image:0"}
    failures = ControlImageProvider().validate(props)
    assert [failure.property for failure in failures] == ["reference"]
    assert "not in this machine's Podman" in failures[0].reason


def test_a_control_image_check_asks_this_machines_podman_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked: list[str] = []

    def local_image_id(reference: str) -> str:
        asked.append(reference)
        return "sha256:ab"

    monkeypatch.setattr(engine_resources, "local_image_id", local_image_id)
    news: dict[str, Any] = {"node": "spark-1", "connection": HEAD.connection_props()}
    news |= {"user": "u", "reference": "localhost/x:1", "image_id": None}
    checked = ControlImageProvider().check({}, news)
    assert checked.failures == [] and checked.inputs["image_id"] == "sha256:ab"
    assert asked == ["localhost/x:1"]


def test_ray_readiness_is_read_not_assumed() -> None:
    provider = RayClusterProvider()
    assert provider.derive({}) == {"ready": True}  # what the program wants
    assert provider.STATE == ("ready",)  # what a refresh reads back from `ray status`


HEAD = Target("spark-1", "10.0.0.1", 22, "u", "/k", "/kh")


def ray_cluster_props(nodes: int) -> dict[str, Any]:
    return {"user": "u", "container": "ray-head", "nodes": nodes, "after": None, "ready": True}


def test_a_ray_cluster_that_answered_ready_is_created_whatever_a_later_query_says(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The first reading says 2 alive; a second query (a loaded node) would fail: the create
    keeps the reading that ended its wait."""
    answers = iter([AliveNodes(("10.0.0.1", "10.0.0.2")), AliveNodes(None, "timed out")])
    monkeypatch.setattr(engine_resources, "gather", lambda _target, _fact: next(answers))
    props = ray_cluster_props(nodes=2)
    provider = RayClusterProvider()
    created = provider.converged(HEAD, props, provider.apply(HEAD, props, None))
    assert (created["ready"], created["active_nodes"]) == (True, 2)


def test_a_failed_ray_query_is_asked_again_before_it_counts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A refresh of a healthy head whose first node query failed reads it ready; a cluster
    whose query keeps failing, or that is short of nodes, reads not ready."""
    monkeypatch.setattr(engine_resources, "READY_POLL_S", 0)
    props = ray_cluster_props(nodes=1)

    def reads(*answers: AliveNodes) -> bool:
        queue = iter(answers)
        monkeypatch.setattr(engine_resources, "gather", lambda _target, _fact: next(queue))
        live = RayClusterProvider().observe(HEAD, props)
        assert live is not None
        return bool(live["ready"])

    failed = AliveNodes(None, "timed out")
    assert reads(failed, AliveNodes(("10.0.0.1",)))
    assert not reads(failed, failed, failed)
    assert not reads(AliveNodes(()))  # a reading: no retry needed


def test_image_source_is_declared_by_the_stack() -> None:
    assert plan_of("sim-2", cluster("sim-2")).serving.image_source == "control"
    assert plan_of("gb10-2", cluster("gb10-2")).serving.image_source == "build"
    raw = cluster("gb10-2")
    raw["serving"]["image_source"] = "registry"
    assert "serving.image_source" in refusal("gb10-2", raw)


def test_a_stack_may_point_at_an_existing_model_directory() -> None:
    raw = cluster("gb10-2")
    raw["serving"]["model_dir"] = "/srv/models"
    assert plan_of("gb10-2", raw).serving.model_dir == "/srv/models"
    raw["serving"]["model_dir"] = "models"  # relative: whose directory?
    assert "serving.model_dir" in refusal("gb10-2", raw)


def test_verification_expects_ray_and_vllm_on_the_head_and_a_worker_elsewhere() -> None:
    inventory = build_inventory(make_plan(load_stack_file("sim-2")))
    held = [(c.node.name, c.container.name) for c in subjects(inventory)["container"]]
    assert held == [("spark-1", "ray-head"), ("spark-1", "vllm"), ("spark-2", "ray-worker")]


def test_sim_16_workers_join_ray_four_at_a_time_in_plan_order() -> None:
    plan = make_plan(load_stack_file("sim-16"))
    workers = [node.name for node in plan.nodes if node.name != plan.head_node]
    waves = plan.serving.ray_join_waves
    assert [len(wave) for wave in waves] == [4, 4, 4, 3]
    assert [name for wave in waves for name in wave] == workers


def test_without_a_join_batch_every_worker_starts_at_once() -> None:
    plan = make_plan(load_stack_file("gb10-16"))
    (wave,) = plan.serving.ray_join_waves
    assert len(wave) == 15 and plan.head_node not in wave


def test_a_failing_container_is_retried_every_5_s_not_at_systemds_100_ms() -> None:
    # at 100 ms, five fast failures use up systemd's start limit and the unit stays failed
    for unit in (run_unit(container_props()), quadlet_unit(container_props())):
        assert "Restart=on-failure\nRestartSec=5\n" in unit


def test_a_container_that_never_ran_is_explained_by_its_units_state_and_log(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ran: list[str] = []

    def run(target: Target, line: str, **kw: Any) -> Result:
        ran.append(line)
        if line.startswith("systemctl"):
            shown = "ActiveState=failed\nResult=exit-code\nNRestarts=3\nExecMainPID=4242\n"
            return Result(shown, "", 0)
        return Result("Error: creating container storage: name ray-worker in use\n", "", 0)

    monkeypatch.setattr(ssh, "run", run)
    target = Target("spark-02", "h", 22, "u", "/k", "/kh")
    why = unit_outcome(target, "sparkrack", "ray-worker.service")
    assert why == (
        "ray-worker.service: ActiveState=failed Result=exit-code NRestarts=3; its log ends:\n"
        "Error: creating container storage: name ray-worker in use"
    )
    # podman's output is under its own scope: found by the unit's main PID, as root
    assert ran[1].endswith("_SYSTEMD_USER_UNIT=ray-worker.service + _PID=4242 || true")


def test_the_api_drains_within_its_stop_bound_and_systemd_waits_for_it() -> None:
    plan = make_plan(load_stack_file("sim-2"))
    spec = api_container(plan, "/m", "/r", "/var/log/vllm.log")
    args = plan.serving.vllm_args
    assert args[args.index("--shutdown-timeout") + 1] == "120"  # vLLM drains for this long
    assert spec.stop_timeout_s == 150  # the drain, then vLLM's own shutdown
    props = container_props(stop_timeout_s=spec.stop_timeout_s)
    quadlet, plain = quadlet_unit(props), run_unit(props)
    assert "PodmanArgs=--stop-timeout=150\n" in quadlet
    assert "podman stop --ignore -t 150 ray-worker" in plain
    for unit in (quadlet, plain):  # systemd's default 90 s would kill a drain
        assert "TimeoutStopSec=160\n" in unit
    assert "TimeoutStopSec" not in run_unit(container_props())  # the others keep the defaults


def test_a_rollout_reads_the_requests_in_flight_then_stops_the_engine_and_says_so(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    ran: list[str] = []

    def run(target: Target, line: str, **kw: Any) -> Result:
        ran.append(line)
        if line.startswith("{ curl"):
            return Result('vllm:num_requests_running{engine="0",model_name="m"} 2.0\n', "", 0)
        return Result("", "", 0)

    monkeypatch.setattr(ssh, "run", run)
    props = {"node": "spark-1", "connection": HEAD.connection_props(), "user": "sparkrack"}
    props |= {"unit": "vllm.service", "metrics_url": "http://h:8000/metrics", "generation": "b"}
    found = engine_resources.EngineRolloutProvider().update(
        "id", {**props, "generation": "a"}, props
    )
    assert found.outs is not None
    assert found.outs["in_flight"] == 2 and found.outs["stopped_at"] > 0
    assert ran[-1] == "systemctl --user -M sparkrack@ stop vllm.service"
    assert "engine stopped for the rollout: drained 2 requests in flight" in capsys.readouterr().err


def test_the_served_model_says_the_downtime_of_a_rollout_only(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(engine_resources, "served_models", lambda target, port: ("m",))
    provider = engine_resources.ServedModelProvider()
    props = {"node": "spark-1", "connection": HEAD.connection_props(), "port": 8000, "model": "m"}
    props |= {"timeout_s": 60, "ready": True, "after": "g2", "stopped_at": time.time() - 20}
    rolled = provider.update("id", {**props, "after": "g1", "stopped_at": 0.0}, props)
    assert rolled.outs is not None and 19.9 <= rolled.outs["downtime_s"] < 30
    assert "m serves again: " in capsys.readouterr().err
    measured = {**props, "downtime_s": rolled.outs["downtime_s"]}
    drifted = provider.update("id", measured, props)  # a re-wait after drift: nothing to time
    assert drifted.outs is not None
    assert drifted.outs["downtime_s"] == rolled.outs["downtime_s"]  # the last rollout's, kept
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize(("health", "restarted"), [("healthy", True), ("starting", False)])
def test_a_loaded_engine_that_does_not_answer_is_restarted_not_waited_on(
    monkeypatch: pytest.MonkeyPatch, health: str, restarted: bool
) -> None:
    ran: list[str] = []
    monkeypatch.setattr(engine_resources, "health_status", lambda target, user, name: health)
    monkeypatch.setattr(engine_resources, "served_models", lambda target, port: ())

    def run(target: Target, line: str, **kw: Any) -> Result:
        ran.append(line)
        return Result("", "", 0)

    monkeypatch.setattr(ssh, "run", run)
    props = {"user": "sparkrack", "container": "vllm", "port": 8000}
    engine_resources.ServedModelProvider().still_waiting(HEAD, props)
    assert bool(ran) == restarted  # a loading engine (startup probe not passed) is waited for
    if restarted:
        assert "podman kill --signal KILL vllm" in ran[0]
        assert ran[1] == "systemctl --user -M sparkrack@ restart vllm.service"


def test_a_loaded_engine_that_answers_another_list_is_not_restarted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(engine_resources, "health_status", lambda target, user, name: "healthy")
    monkeypatch.setattr(engine_resources, "served_models", lambda target, port: ("other",))
    monkeypatch.setattr(ssh, "run", lambda *a, **kw: pytest.fail(f"ran {a[1]}"))
    props = {"user": "sparkrack", "container": "vllm", "port": 8000}
    engine_resources.ServedModelProvider().still_waiting(HEAD, props)
