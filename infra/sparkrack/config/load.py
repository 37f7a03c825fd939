"""Reading configuration: the only module that does.

A stack file's `sparkrack:cluster` value (or the same value as Pulumi hands it to the program)
becomes a validated `ClusterSpec`: catalogue names and model files are resolved here, pydantic
validates, `cross_check` looks across fields, and every failure becomes one `SpecError` that
names the stack, the node and the field (`problems.py` words pydantic's errors). The secrets
are `secrets.py`'s: this module only refuses one set in clear in the stack file it reads.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from sparkrack import catalog
from sparkrack.config.problems import problem_of
from sparkrack.config.secrets import plain_in_file, refuse_plain
from sparkrack.config.yamlload import load_stack_yaml, yaml_error_line
from sparkrack.stackspec import ClusterSpec, cross_check, deploy_problems, plan_problems
from sparkrack.stackspec.errors import Problem, SpecError
from sparkrack.stackspec.raw import raw_problems
from sparkrack.stackspec.secrets import API_KEY_KEY

SPEC_KEY = "sparkrack:cluster"
STACKS_DIR_ENV = "SPARKRACK_STACKS_DIR"


def default_stacks_dir() -> Path:
    """$SPARKRACK_STACKS_DIR, else ./stacks, else the stacks/ of the checkout this package is in."""
    if from_env := os.environ.get(STACKS_DIR_ENV):
        return Path(from_env)
    here = Path.cwd() / "stacks"
    if here.is_dir():
        return here
    return Path(__file__).resolve().parents[3] / "stacks"


def stack_path(stack: str, stacks_dir: Path | None = None) -> Path:
    """Where a stack's file is: stacks/Pulumi.<stack>.yaml."""
    return (stacks_dir or default_stacks_dir()) / f"Pulumi.{stack}.yaml"


def load_stack_file(stack: str, stacks_dir: Path | None = None) -> ClusterSpec:
    """Read stacks/Pulumi.<stack>.yaml and validate its `sparkrack:cluster` value."""
    path = stack_path(stack, stacks_dir)
    directory = path.parent
    if not path.is_file():
        known = sorted(
            p.name.removeprefix("Pulumi.").removesuffix(".yaml")
            for p in directory.glob("Pulumi.*.yaml")
        )
        raise SpecError(
            stack,
            [Problem(str(path), f"no such stack file; stacks there: {', '.join(known) or 'none'}")],
        )
    return spec_from_document(stack, _read_yaml(stack, path), path)


def spec_from_document(stack: str, document: object, path: Path) -> ClusterSpec:
    """A stack file's parsed YAML (read from `path`, or about to be written there) validated:
    its `sparkrack:cluster` value, model files resolved beside `path`."""
    config = document.get("config") if isinstance(document, dict) else None
    if not isinstance(config, dict) or SPEC_KEY not in config:
        raise SpecError(stack, [Problem(f"{path.name}: config.{SPEC_KEY}", "missing")])
    refuse_plain(stack, plain_in_file(config))
    keyed = f"sparkrack:{API_KEY_KEY}" in config
    return spec_from_config(stack, config[SPEC_KEY], base_dir=path.parent, api_key=keyed)


def spec_from_config(
    stack: str, raw: object, *, base_dir: Path | None = None, api_key: bool = False
) -> ClusterSpec:
    """Validate the value of `sparkrack:cluster`. A model file is resolved against `base_dir`
    (default: the stacks directory); `api_key`: whether the stack sets sparkrack:apiKey."""
    if not isinstance(raw, Mapping):
        raise SpecError(stack, [Problem(SPEC_KEY, f"expected a mapping, got {type(raw).__name__}")])
    if problems := raw_problems(stack, raw):
        raise SpecError(stack, problems)
    if "stack" in raw:
        raise SpecError(stack, [Problem("stack", "set from the stack's name; remove it")])
    serving = raw.get("serving")
    if isinstance(serving, Mapping) and "api_key" in serving:
        why = f"set from whether the Pulumi secret sparkrack:{API_KEY_KEY} is; remove it"
        raise SpecError(stack, [Problem("serving.api_key", why)])
    resolved = {
        **raw,
        "serving": {**serving, "api_key": api_key} if isinstance(serving, Mapping) else serving,
        "stack": stack,
        "hardware_profiles": _hardware_profiles(stack, raw.get("hardware_profiles") or {}),
        "model": _model(stack, raw.get("model"), base_dir or default_stacks_dir()),
    }
    try:
        spec = ClusterSpec.model_validate(resolved)
    except ValidationError as error:
        raise SpecError(stack, [problem_of(e, resolved) for e in error.errors()]) from None
    if problems := [*cross_check(spec), *_local_file_problems(spec)]:
        raise SpecError(stack, problems)
    return spec


def _local_file_problems(spec: ClusterSpec) -> Iterator[Problem]:
    """The SSH key and known_hosts files the stack names, as far as this machine has them: one
    that is there must be a file this user reads (a directory was only found at `up`, worded
    "unreachable"). One not there yet is left to `up`: `sparkrack sim up` writes the sim's."""
    named = [("ssh.key_path", spec.ssh.key_path), ("ssh.known_hosts", spec.ssh.known_hosts)]
    for i, node in enumerate(spec.nodes):
        for field in ("key_path", "known_hosts"):
            if (path := getattr(node.ssh, field)) is not None:
                named.append((f"nodes[{i}] ({node.name}).ssh.{field}", path))
    for field, path in named:
        if why := _not_a_readable_file(Path(path).expanduser()):
            yield Problem(field, why)


def _not_a_readable_file(path: Path) -> str | None:
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return None
    except OSError as error:
        return f"cannot read {path}: {error.strerror}"
    if not stat.S_ISREG(mode):
        return f"{path} is {_kind(mode)}, not a file"
    return None if os.access(path, os.R_OK) else f"{path} is not readable by this user"


def refuse_undeployable(spec: ClusterSpec) -> ClusterSpec:
    """The spec, when a real rack could deploy it (see stackspec.checks.deploy_problems)."""
    if problems := deploy_problems(spec):
        raise SpecError(spec.stack, problems)
    return spec


def refuse_unplannable(spec: ClusterSpec) -> ClusterSpec:
    """The spec, unless it holds a mistake `sparkrack plan` refuses too
    (stackspec.checks.plan_problems); what only deploying needs is left to the program."""
    if problems := plan_problems(spec):
        raise SpecError(spec.stack, problems)
    return spec


def spec_for_estimate(
    *,
    hardware: str,
    nodes: int,
    model: str | None = None,
    model_file: Path | None = None,
    tensor_parallel_size: int | None = None,
    pipeline_parallel_size: int | None = None,
    max_model_len: int | None = None,
) -> ClusterSpec:
    """A made-up cluster of `nodes` x `hardware` for `sparkrack estimate`: planning before buying.

    Two single-GPU nodes are cabled port to port; more sit four to a switch port, as in seed 004;
    multi-GPU servers put every rail on one switch."""
    stack = "estimate"
    profile = catalog.entry("hardware", hardware)
    if profile is None:
        known = ", ".join(catalog.names("hardware"))
        raise SpecError(stack, [Problem("--hardware", f"unknown {hardware!r}; known: {known}")])
    names = [f"node-{i + 1}" for i in range(nodes)]
    raw: dict[str, Any] = {
        "ssh": {"user": "estimate"},
        "nodes": [
            {"name": name, "address": f"198.18.{i // 250}.{i % 250 + 1}", "hardware": hardware}
            for i, name in enumerate(names)
        ],
        "fabric": _estimate_fabric(names, profile) if nodes > 1 else None,
        "model": {"file": str(model_file)} if model_file else model,
        "serving": {
            "engine": {"image": "estimate"},
            "tensor_parallel_size": tensor_parallel_size or "auto",
            "pipeline_parallel_size": pipeline_parallel_size or "auto",
            "max_model_len": max_model_len,
        },
    }
    return spec_from_config(stack, raw, base_dir=Path.cwd())


def _estimate_fabric(names: list[str], profile: Mapping[str, Any]) -> dict[str, Any]:
    pool = "198.19.0.0/16"
    multi_gpu = profile.get("gpus", 1) > 1
    if len(names) == 2 and not multi_gpu:
        return {"subnet": pool, "cables": [{"a": names[0], "b": names[1]}]}
    if multi_gpu:  # every rail of every server on a switch port of its own
        lanes = [[f"{name}:{port['name']}"] for name in names for port in profile.get("ports", [])]
    else:  # four nodes behind each switch port, as in seed 004
        lanes = [names[i : i + 4] for i in range(0, len(names), 4)]
    ports: list[dict[str, Any]] = [
        {"name": str(i), "breakout": len(lane), "nodes": lane} for i, lane in enumerate(lanes)
    ]
    return {"subnet": pool, "switch": {"ports": ports}}


# --- resolving names and files ----------------------------------------------------------------


# A stack file of 16 nodes is ~5 kB: anything near this is not one written by hand.
MAX_STACK_FILE_BYTES = 256 * 1024


def _not_a_small_file(path: Path) -> str | None:
    """Why `path` is not a file to read whole (a device such as /dev/zero never ends)."""
    found = path.stat()
    if not stat.S_ISREG(found.st_mode):
        return f"{path} is {_kind(found.st_mode)}, not a file"
    if found.st_size > MAX_STACK_FILE_BYTES:
        limit = MAX_STACK_FILE_BYTES // 1024
        return f"{path} is {found.st_size} bytes: a stack or model file is at most {limit} KiB"
    return None


def _kind(mode: int) -> str:
    kinds = {stat.S_ISDIR: "a directory", stat.S_ISFIFO: "a named pipe", stat.S_ISSOCK: "a socket"}
    return next((kind for test, kind in kinds.items() if test(mode)), "a device")


def _read_yaml(stack: str, path: Path, field: str | None = None) -> Any:
    """A stack or model file's YAML; whatever stops it is one SpecError naming `field`."""
    try:
        return _parse(path)
    except _Unreadable as error:
        raise SpecError(stack, [Problem(field or str(path), str(error))]) from None


class _Unreadable(Exception):
    pass


def _parse(path: Path) -> Any:
    try:
        if why := _not_a_small_file(path):
            raise _Unreadable(why)
        return load_stack_yaml(path.read_text())
    except OSError as error:
        raise _Unreadable(f"cannot read {path}: {error.strerror}") from None
    except UnicodeDecodeError as error:
        raise _Unreadable(f"{path} is not UTF-8 text (byte {error.start})") from None
    except yaml.YAMLError as error:
        raise _Unreadable(f"{path} is not valid YAML: {yaml_error_line(error)}") from None
    except RecursionError:
        raise _Unreadable(f"{path} is nested too deep to read") from None
    except ValueError as error:  # Python's own limit: an integer of more than 4,300 digits
        said = str(error).split(":")[0]
        raise _Unreadable(f"{path} holds a value too large to read ({said})") from None


def _hardware_profiles(stack: str, declared: object) -> object:
    """The catalogue's profiles plus the stack's own; `base: gb10` starts from a catalogue one."""
    if not isinstance(declared, Mapping):
        return declared  # pydantic says what is wrong with it
    profiles: dict[str, Any] = {
        name: catalog.entry("hardware", name) for name in catalog.names("hardware")
    }
    for name, body in declared.items():
        if isinstance(body, Mapping) and "base" in body:
            base = catalog.entry("hardware", str(body["base"]))
            if base is None:
                known = ", ".join(catalog.names("hardware"))
                problem = Problem(
                    f"hardware_profiles.{name}.base", f"unknown {body['base']!r}; known: {known}"
                )
                raise SpecError(stack, [problem])
            body = catalog.merged(base, {k: v for k, v in body.items() if k != "base"})
        profiles[name] = body
    return profiles


def _model(stack: str, declared: object, base_dir: Path) -> object:
    """A catalogue name, `{catalog: name, ...overrides}`, `{file: path, ...}`, or inline."""
    if isinstance(declared, str):
        declared = {"catalog": declared}
    if not isinstance(declared, Mapping):
        return declared
    overrides = {k: v for k, v in declared.items() if k not in ("catalog", "file")}
    if "catalog" in declared and "file" in declared:
        raise SpecError(stack, [Problem("model", "give a catalogue name or a file, not both")])
    if "catalog" in declared:
        found = catalog.entry("models", str(declared["catalog"]))
        if found is None:
            known = ", ".join(catalog.names("models"))
            raise SpecError(
                stack,
                [Problem("model", f"no catalogue model {declared['catalog']!r}; known: {known}")],
            )
        return catalog.merged(found, overrides)
    if "file" in declared:
        path = (base_dir / Path(str(declared["file"])).expanduser()).resolve()
        from_file = _read_yaml(stack, path, "model.file")
        if not isinstance(from_file, Mapping):
            raise SpecError(stack, [Problem("model.file", f"{path} does not hold a mapping")])
        if problems := raw_problems(stack, from_file, "model"):  # as bounded as the stack
            raise SpecError(stack, problems)
        return catalog.merged(from_file, overrides)
    return declared
