"""What `sparkrack images|weights list|prune` keeps and removes (issue 31): never what the Plan
names or a container uses, the newest other engine image kept for a rollback, the rest listed as
unreferenced and removed only by `prune --yes`."""

from __future__ import annotations

import pytest

from sparkrack.facts.podman import StoredImage
from sparkrack.ops.housekeeping import (
    Held,
    judge_images,
    judge_weights,
    planned_images,
    removal,
    render,
    repository,
)

from .support import cluster, plan_of

pytestmark = pytest.mark.unit

PLAN = plan_of("sim-2", cluster("sim-2"))
ENGINE = PLAN.serving.image  # localhost/sparkrack/engine-standin:latest
EXPORTERS = PLAN.monitoring.exporters_image


def image(id_: str, *names: str, containers: int = 0, created: int = 0) -> StoredImage:
    return StoredImage(id_, names, 1_000_000, created, containers)


@pytest.mark.parametrize(
    ("reference", "found"),
    [
        ("localhost/sparkrack/engine-standin:latest", "localhost/sparkrack/engine-standin"),
        ("docker.io/vllm/vllm-openai:v0.27.1", "docker.io/vllm/vllm-openai"),
        ("registry:5000/team/engine:1", "registry:5000/team/engine"),  # a port is not a tag
        ("busybox", "busybox"),
    ],
)
def test_repository(reference: str, found: str) -> None:
    assert repository(reference) == found


def test_the_plans_images_are_its_engine_and_its_monitoring() -> None:
    assert {ENGINE, EXPORTERS, PLAN.monitoring.prometheus_image} == set(planned_images(PLAN))


def test_images_planned_in_use_one_rollback_and_the_rest_unreferenced() -> None:
    stored = (  # newest first, as the fact reads them
        image("a1", ENGINE, containers=3, created=50),
        image("b2", EXPORTERS, containers=2, created=40),
        image("c3", "localhost/sparkrack/engine-standin:previous", created=30),
        image("d4", "localhost/sparkrack/engine-standin:older", created=20),
        image("e5", "localhost/sparkrack/e2e-app:1", containers=1, created=10),
        image("f6", created=5),
        image("g7", "localhost/sparkrack/other:1", created=1),
    )
    verdicts = {held.ident: held.verdict for held in judge_images("spark-1", stored, PLAN)}
    assert verdicts == {
        "a1": "planned",
        "b2": "planned",
        "c3": "rollback",  # the newest other engine image: switching back moves nothing
        "d4": "unreferenced",
        "e5": "in use",
        "f6": "unreferenced",  # untagged: what an engine upgrade leaves behind
        "g7": "unreferenced",
    }


def test_weights_the_plans_model_is_planned_every_other_repository_unreferenced() -> None:
    node = PLAN.node("spark-2")
    cache = f"{node.paths.model_dir}/hub"
    planned = f"{cache}/models--{PLAN.serving.model.replace('/', '--')}"
    held = judge_weights(node, {planned: 10, f"{cache}/models--old--model": 20}, PLAN)
    assert [(item.name, item.verdict, item.size) for item in held] == sorted(
        [
            (planned.rsplit("/", 1)[1], "planned", 10),
            ("models--old--model", "unreferenced", 20),
        ]
    )


def test_prune_removes_by_id_or_path_with_an_argument_vector() -> None:
    images = [Held("n", "x", "f6e1", 1, "unreferenced"), Held("n", "y", "0a2b", 1, "unreferenced")]
    assert removal("images", images) == "podman rmi -- f6e1 0a2b"
    odd = [Held("n", "m", "/home/s/hub/models--a b;rm -rf ~", 1, "unreferenced")]
    assert removal("weights", odd) == "rm -rf -- '/home/s/hub/models--a b;rm -rf ~'"


def test_render_says_what_is_kept_and_how_much_goes() -> None:
    held = [
        Held("spark-1", ENGINE, "a1" * 32, 2_000_000_000, "planned"),
        Held("spark-1", "<untagged>", "f6" * 32, 500_000_000, "unreferenced"),
    ]
    text = render("images", "sim-2", held, "would be removed by `prune --yes` (dry run)")
    assert text.splitlines()[0] == "sparkrack images: stack sim-2"
    assert "a1a1a1a1a1a1" in text and "a1" * 32 not in text  # ids shortened as podman does
    assert text.splitlines()[-1] == (
        "1 unreferenced (500 MB): would be removed by `prune --yes` (dry run)"
    )
