"""The monitoring images are pinned as the engine is (issue 32): a real stack names one build of
each, and the Go release its cAdvisor is built with exists (held to the Go module proxy, which
serves every Go release as golang.org/toolchain; the golang image is tagged per release)."""

from __future__ import annotations

import re
import urllib.request

import pytest

from sparkrack.config.load import spec_from_config
from sparkrack.stackspec import plan_problems
from sparkrack.stackspec.errors import Problem
from sparkrack.stackspec.roles import MonitoringRoleSpec
from tests.unit.support import STACKS, Cluster, named_model

pytestmark = pytest.mark.unit

REAL_STACKS = ("gb10-2", "gb10-16", "h200-2")
GO_PROXY = "https://proxy.golang.org/golang.org/toolchain/@v/v0.0.1-go{}.linux-amd64.info"


def problems_of(stack: str, raw: Cluster) -> list[Problem]:
    return plan_problems(spec_from_config(stack, raw, base_dir=STACKS))


@pytest.mark.parametrize("stack", REAL_STACKS)
def test_every_real_stack_names_one_build_of_each_monitoring_image(stack: str) -> None:
    assert problems_of(stack, named_model(stack)) == []


@pytest.mark.parametrize(
    ("field", "reference"),
    [
        ("exporters_image", "localhost/sparkrack/exporters:latest"),
        ("grafana_image", "docker.io/grafana/grafana-oss:main"),
    ],
)
def test_a_moving_monitoring_image_is_refused_naming_the_field(field: str, reference: str) -> None:
    raw = named_model("gb10-2")
    raw["monitoring"][field] = reference

    problems = problems_of("gb10-2", raw)

    assert [(p.path, p.message) for p in problems] == [
        (
            f"monitoring.{field}",
            f"{reference} is not pinned: name a tag of one build or a @sha256 digest (what runs "
            "must not change under the stack)",
        )
    ]


def test_a_moving_base_is_refused_where_the_head_builds_the_images() -> None:
    raw = named_model("gb10-2")
    raw.setdefault("roles", {})["monitoring"] = {"golang_image": "docker.io/library/golang:latest"}

    problems = problems_of("gb10-2", raw)

    assert [p.path for p in problems] == ["roles.monitoring.golang_image"]


def test_the_go_release_of_the_golang_base_exists() -> None:
    tag = MonitoringRoleSpec().golang_image.rsplit(":", 1)[1]
    release = re.fullmatch(r"(\d+\.\d+\.\d+)-trixie", tag)
    assert release, f"{tag}: name one Go release (1.26.8-trixie), not a line of them"
    with urllib.request.urlopen(GO_PROXY.format(release.group(1)), timeout=30) as answer:
        assert f"go{release.group(1)}" in answer.read().decode()
