"""`sparkrack model pin`: the stack's model repository resolved to the commit a revision names now
(through huggingface_hub, as the head's download reads it), written into the stack file as
`model.hf_repo` and `model.revision`, its comments and the rest of it kept. Nobody copies a hash
by hand, and the rack then loads exactly that commit."""

from __future__ import annotations

import re
from dataclasses import dataclass

# A stack file's `model:` line: its indent, and what follows the colon (a name, or nothing when
# a block mapping follows), and a trailing comment.
MODEL_LINE = re.compile(r"^(?P<indent>\s*)model:(?P<value>[^#]*?)\s*(?P<comment>#.*)?$")
PINNED_KEYS = ("hf_repo", "revision")


class PinError(ValueError):
    """Why the stack's model could not be pinned: the Hub's refusal, or a file this cannot edit."""


@dataclass(frozen=True)
class Pin:
    repo: str
    commit: str
    revision: str  # what was resolved: a branch or tag, or the commit itself


def resolve(repo: str, revision: str, endpoint: str | None = None) -> Pin:
    """The commit `revision` of `repo` names now. The token is huggingface_hub's own (HF_TOKEN,
    or `hf auth login`'s): gated repositories need it, and it never passes through sparkrack."""
    from huggingface_hub import HfApi
    from huggingface_hub.errors import (
        HfHubHTTPError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    try:
        info = HfApi(endpoint=endpoint).model_info(repo, revision=revision)
    except RevisionNotFoundError:
        raise PinError(f"{repo} has no revision {revision!r}") from None
    except RepositoryNotFoundError:
        raise PinError(
            f"{repo}: no such repository, or it is gated and no token grants it"
        ) from None
    except (HfHubHTTPError, OSError) as error:
        raise PinError(f"{repo}: the Hub did not answer ({first_line(error)})") from None
    except ValueError as error:  # huggingface_hub's HFValidationError: not a repository id
        raise PinError(f"{repo!r} is not a repository id: {first_line(error)}") from None
    if not info.sha:
        raise PinError(f"{repo}@{revision}: the Hub gave no commit")
    return Pin(repo, info.sha, revision)


def first_line(error: Exception) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0]


def pinned_text(text: str, pin: Pin, note: str) -> str:
    """`text` (a stack file) with its cluster's model naming `pin`'s repository and commit. A
    model given by name becomes `{catalog: name, hf_repo, revision}`; a block mapping gets the
    two keys (replacing any there). An inline mapping is refused: rewriting it would lose its
    layout."""
    lines = text.splitlines()
    at = model_line(lines)
    found = MODEL_LINE.match(lines[at])
    assert found is not None  # model_line found it so
    indent, value = found["indent"], found["value"].strip()
    comment = f"  {found['comment']}" if found["comment"] else ""
    child = indent + "  "
    pinned = [f"{child}hf_repo: {pin.repo}", f"{child}revision: {pin.commit}  # {note}"]
    if value.startswith("{"):
        raise PinError(f"line {at + 1}: model is an inline mapping; write it as a block")
    if value:
        block = [f"{indent}model:{comment}", f"{child}catalog: {value}", *pinned]
        return "\n".join([*lines[:at], *block, *lines[at + 1 :]]) + "\n"
    end = block_end(lines, at, len(indent))
    kept = [line for line in lines[at + 1 : end] if not is_key(line, PINNED_KEYS)]
    return "\n".join([*lines[: at + 1], *kept, *pinned, *lines[end:]]) + "\n"


def model_line(lines: list[str]) -> int:
    """The index of the cluster's own `model:` line (the first at the cluster's key indent)."""
    start = next((i for i, line in enumerate(lines) if line.strip() == "sparkrack:cluster:"), None)
    if start is None:
        raise PinError("no `sparkrack:cluster:` block in the stack file")
    keys = [i for i in range(start + 1, len(lines)) if is_content(lines[i])]
    if not keys:
        raise PinError("the `sparkrack:cluster:` block is empty")
    indent = indentation(lines[keys[0]])
    for i in keys:
        if indentation(lines[i]) < indent:
            break
        if indentation(lines[i]) == indent and MODEL_LINE.match(lines[i]):
            return i
    raise PinError("the cluster names no model")


def block_end(lines: list[str], at: int, indent: int) -> int:
    """The index after the last line deeper than `indent` that follows `at`."""
    end = at + 1
    for i in range(at + 1, len(lines)):
        if is_content(lines[i]) and indentation(lines[i]) <= indent:
            break
        if is_content(lines[i]):
            end = i + 1
    return end


def is_key(line: str, keys: tuple[str, ...]) -> bool:
    return line.strip().split(":", 1)[0] in keys


def is_content(line: str) -> bool:
    return bool(line.strip()) and not line.strip().startswith("#")


def indentation(line: str) -> int:
    return len(line) - len(line.lstrip(" "))
