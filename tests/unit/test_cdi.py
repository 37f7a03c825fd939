"""The CDI spec resource without a node: a spec for another driver reads as drift, `up` generates
it again into a directory beside it and renames it whole, and what it cannot do it says, naming
the node and what to install."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest

from sparkrack.facts.gpu import cdi_spec, running_driver, toolkit_version
from sparkrack.resources.cdi import LOADED, CdiSpecProvider, generate_script
from sparkrack.transport import ssh
from sparkrack.transport.target import Result, SshError, Target

pytestmark = pytest.mark.unit

PATH = "/etc/cdi/nvidia.yaml"
TARGET = Target("spark-1", "192.0.2.11", 22, "sparkrack", "/k", "/kh")
CTK_VERSION = "NVIDIA Container Toolkit CLI version 1.17.8\n"
GB10_MODULE = "{version}\n"  # /sys/module/nvidia/version


def spec_for(version: str, devices: tuple[str, ...] = ("0", "all")) -> str:
    """A spec as nvidia-ctk 1.18 writes it, cut down to what the fact reads."""
    named = "".join(f'    - name: "{name}"\n' for name in devices)
    library = f"/usr/lib/aarch64-linux-gnu/libcuda.so.{version}"
    return (
        f"---\ncdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n{named}"
        f"containerEdits:\n    mounts:\n        - hostPath: {library}\n"
        f"          containerPath: {library}\n"
    )


class FakeNode:
    """Answers the facts' commands from its state; `generate` writes a spec for its driver."""

    def __init__(
        self, driver: str | None = "580.95.05", spec: str | None = None, ctk: bool = True
    ) -> None:
        self.driver, self.spec, self.ctk = driver, spec, ctk
        self.ran: list[tuple[str, bool]] = []

    def run(self, target: Target, command: str, *, sudo: bool = False, **_: Any) -> Result:
        self.ran.append((command, sudo))
        if command == cdi_spec(PATH).command:
            return Result(self.spec if self.spec is not None else "#absent\n", "", 0)
        if command == running_driver().command:
            version = self.driver
            return Result(GB10_MODULE.format(version=version) if version else "", "", 0)
        if command == toolkit_version().command:
            return Result(CTK_VERSION if self.ctk else "", "", 0)
        if command == generate_script(PATH):
            assert self.driver is not None and self.ctk
            self.spec = spec_for(self.driver)
            return Result("", "", 0)
        if command == f"rm -f -- {PATH}":
            self.spec = None
            return Result("", "", 0)
        raise AssertionError(f"unexpected command {command!r}")

    @property
    def generated(self) -> bool:
        return any(command == generate_script(PATH) for command, _ in self.ran)


@pytest.fixture
def node(monkeypatch: pytest.MonkeyPatch) -> FakeNode:
    fake = FakeNode()
    monkeypatch.setattr(ssh, "run", fake.run)
    return fake


def props(toolkit: str = "preinstalled", **more: Any) -> dict[str, Any]:
    """What check() hands create: the program's inputs, then the derived ones."""
    news = {
        "node": TARGET.node,
        "connection": TARGET.connection_props(),
        "path": PATH,
        "devices": ["nvidia.com/gpu=all"],
        "toolkit": toolkit,
        "toolkit_package": "nvidia-container-toolkit",
        "driver": None,
        **more,
    }
    checked = CdiSpecProvider().check({}, news)
    assert not checked.failures, checked.failures
    return dict(checked.inputs)


def test_the_program_wants_the_spec_of_the_loaded_driver() -> None:
    wanted = props(devices=["nvidia.com/gpu=all", "nvidia.com/gpu=0", "nvidia.com/gpu=all"])
    assert wanted["driver"] == LOADED
    assert wanted["devices"] == ["nvidia.com/gpu=0", "nvidia.com/gpu=all"]


def test_a_path_that_is_no_spec_name_is_refused_at_check() -> None:
    news = {"node": "n", "connection": {}, "path": "/etc/cdi/nvidia", "devices": ["x"]}
    news |= {"toolkit": "apt", "toolkit_package": "p"}
    failures = CdiSpecProvider().check({}, news).failures
    # nvidia-ctk would write /etc/cdi/nvidia.yaml instead, and the read would find nothing
    assert [failure.property for failure in failures] == ["path"]


def test_a_spec_for_another_driver_reads_as_drift(node: FakeNode) -> None:
    node.driver, node.spec = "580.126.09", spec_for("580.95.05")
    provider, wanted = CdiSpecProvider(), props()
    read = provider.read("spark-1:CDI spec", {**wanted, "restore": {"generated": True}})
    assert read.inputs is not None and read.outs is not None
    assert read.inputs["driver"] == "generated for 580.95.05; 580.126.09 is loaded"
    assert read.inputs["devices"] == ["nvidia.com/gpu=all"]  # the devices are still declared
    assert (read.outs["spec_driver"], read.outs["loaded_driver"]) == ("580.95.05", "580.126.09")
    diff = provider.diff("spark-1:CDI spec", dict(read.outs), wanted)
    assert diff.changes is not False and not diff.replaces  # an update: generated again


def test_the_spec_of_the_loaded_driver_reads_as_wanted(node: FakeNode) -> None:
    node.spec = spec_for("580.95.05")
    provider, wanted = CdiSpecProvider(), props()
    read = provider.read("spark-1:CDI spec", wanted)
    assert read.inputs is not None and read.outs is not None
    assert provider.diff("spark-1:CDI spec", dict(read.outs), wanted).changes is False


def test_a_missing_device_reads_as_drift(node: FakeNode) -> None:
    node.spec = spec_for("580.95.05", devices=("0",))
    read = CdiSpecProvider().read("spark-1:CDI spec", props())
    assert read.inputs is not None and read.inputs["devices"] == []


def test_an_absent_spec_reads_as_gone(node: FakeNode) -> None:
    assert CdiSpecProvider().read("spark-1:CDI spec", props()).id == ""


def test_up_generates_the_stale_spec_again_as_root(node: FakeNode) -> None:
    node.driver, node.spec = "580.126.09", spec_for("580.95.05")
    provider, wanted = CdiSpecProvider(), props()
    olds = {**wanted, "restore": {"generated": False}}
    outputs = provider.update("spark-1:CDI spec", olds, wanted)
    assert (generate_script(PATH), True) in node.ran
    assert outputs.outs is not None
    assert outputs.outs["driver"] == LOADED and outputs.outs["spec_driver"] == "580.126.09"
    assert outputs.outs["restore"] == {"generated": False}  # what create found is kept


def test_create_adopts_a_spec_already_right_and_delete_leaves_it(node: FakeNode) -> None:
    node.spec = spec_for("580.95.05")
    provider = CdiSpecProvider()
    created = provider.create(props())
    assert not node.generated and created.outs is not None
    assert created.outs["restore"] == {"generated": False}
    provider.delete(created.id, dict(created.outs))
    assert node.spec is not None  # not ours: the node had it


def test_delete_removes_the_spec_this_resource_generated(node: FakeNode) -> None:
    provider = CdiSpecProvider()
    created = provider.create(props())
    assert node.generated and created.outs is not None
    assert created.outs["restore"] == {"generated": True}
    assert created.outs["spec_devices"] == ["nvidia.com/gpu=0", "nvidia.com/gpu=all"]
    provider.delete(created.id, dict(created.outs))
    assert node.spec is None and (f"rm -f -- {PATH}", True) in node.ran


def test_without_a_driver_up_says_to_install_it(node: FakeNode) -> None:
    node.driver = None
    with pytest.raises(SshError) as refused:
        CdiSpecProvider().create(props())
    message = str(refused.value)
    assert message.startswith("node spark-1 (192.0.2.11): no NVIDIA driver is loaded")
    assert "install the NVIDIA driver" in message
    assert not node.generated


def test_without_nvidia_ctk_on_dgx_os_up_says_to_install_the_toolkit(node: FakeNode) -> None:
    node.ctk = False
    with pytest.raises(SshError) as refused:
        CdiSpecProvider().create(props("preinstalled"))
    message = str(refused.value)
    assert message.startswith("node spark-1 (192.0.2.11): no nvidia-ctk")
    assert "DGX OS ships nvidia-container-toolkit; install it" in message


def test_a_spec_generated_without_a_wanted_device_fails_the_read_back(node: FakeNode) -> None:
    with pytest.raises(SshError) as refused:
        CdiSpecProvider().create(props(devices=["nvidia.com/gpu=all", "nvidia.com/gpu=7"]))
    where = "node spark-1 (192.0.2.11): CDI spec /etc/cdi/nvidia.yaml"
    assert f"{where} applied but reads devices=" in str(refused.value)
    assert node.spec is None  # the failed create takes back the spec it generated


# --- the generate script itself, run here with a stand-in nvidia-ctk --------------------------

NVIDIA_CTK = """#!/bin/sh
# a stand-in: writes the spec to --output=..., or half of it and fails
for arg; do case "$arg" in --output=*) out="${arg#--output=}";; esac; done
printf -- '---\\ncdiVersion: 0.5.0\\nkind: nvidia.com/gpu\\n' > "$out"
[ -n "${FAIL:-}" ] && { echo "failed to generate CDI spec: boom" >&2; exit 1; }
printf 'devices:\\n    - name: all\\n' >> "$out"
"""


def generate_here(tmp_path: Path, fail: bool) -> subprocess.CompletedProcess[str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    ctk = bin_dir / "nvidia-ctk"
    ctk.write_text(NVIDIA_CTK)
    ctk.chmod(ctk.stat().st_mode | stat.S_IXUSR)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "FAIL": "1" if fail else ""}
    script = generate_script(str(tmp_path / "cdi" / "nvidia.yaml"))
    return subprocess.run(["sh", "-c", script], env=env, capture_output=True, text=True)


def test_generate_writes_beside_the_spec_and_renames_it_whole(tmp_path: Path) -> None:
    done = generate_here(tmp_path, fail=False)
    assert done.returncode == 0, done.stderr
    assert os.listdir(tmp_path / "cdi") == ["nvidia.yaml"]  # the temporary directory is gone
    assert "name: all" in (tmp_path / "cdi" / "nvidia.yaml").read_text()


def test_a_failed_generate_leaves_the_old_spec_and_nothing_else(tmp_path: Path) -> None:
    (tmp_path / "cdi").mkdir()
    (tmp_path / "cdi" / "nvidia.yaml").write_text("the old spec\n")
    done = generate_here(tmp_path, fail=True)
    assert done.returncode != 0 and "boom" in done.stderr
    assert os.listdir(tmp_path / "cdi") == ["nvidia.yaml"]
    assert (tmp_path / "cdi" / "nvidia.yaml").read_text() == "the old spec\n"


def test_the_temporary_directory_is_no_spec_a_cdi_registry_would_read() -> None:
    script = generate_script(PATH)
    # a directory beside the spec: registries skip subdirectories of /etc/cdi; the file in it
    # keeps the .yaml name, or nvidia-ctk would append .yaml to it
    assert "tmp=$(mktemp -d /etc/cdi/.nvidia.yaml.sparkrack-tmp.XXXXXX)" in script
    assert 'nvidia-ctk cdi generate --output="$tmp"/nvidia.yaml' in script
    assert 'mv -f -- "$tmp"/nvidia.yaml /etc/cdi/nvidia.yaml' in script
