"""Whether this container has a GPU, as CUDA decides it: through the driver's device nodes.

Part of the engine stand-in (NOT CUDA): pure standard library, beside engine.py in the image.
vLLM fails at start-up in a container without them, however the rest is set up; so does the
stand-in. A container gets them from the node's CDI spec (`--device nvidia.com/gpu=all`); the
simulated node has such nodes with nothing behind them, which is all this looks at.
"""

from __future__ import annotations

import stat
from pathlib import Path

DEV = Path("/dev")
CONTROL_NODE = "nvidiactl"
HOW_TO_GIVE = "give the container the node's CDI device (--device nvidia.com/gpu=all)"


def is_char_device(path: Path) -> bool:
    try:
        return stat.S_ISCHR(path.stat().st_mode)
    except OSError:
        return False


def visible_gpus(dev: Path = DEV) -> list[int]:
    """The GPU indexes CUDA would enumerate: /dev/nvidiaN, once the control node is there."""
    if not is_char_device(dev / CONTROL_NODE):
        return []
    indexes = (path.name.removeprefix("nvidia") for path in dev.glob("nvidia[0-9]*"))
    return sorted(int(i) for i in indexes if i.isdigit() and is_char_device(dev / f"nvidia{i}"))


def no_gpu_refusal(dev: Path = DEV) -> str | None:
    """vLLM's error in a container without a GPU, and what is missing; None when one is here."""
    if visible_gpus(dev):
        return None
    missing = CONTROL_NODE if not is_char_device(dev / CONTROL_NODE) else "nvidia0"
    return f"RuntimeError: No CUDA GPUs are available (no {dev / missing}: {HOW_TO_GIVE})"
