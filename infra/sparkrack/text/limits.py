"""A process limit as one value: the memory a process may lock (memlock), with its spelling in
each dialect that sets or shows it and the one rule that judges a limit a node reports.

NCCL registers its RDMA buffers in locked memory and, allowed less than it needs, silently runs
on TCP sockets (FACTS; seed 001). The Plan holds the limit; the base role writes it for systemd,
the engine's containers are given it for Podman, verification reads it back from /proc and the
doctor from systemd. Pure text: every room may import it, resources and facts included.
"""

from __future__ import annotations

from dataclasses import dataclass

# How each dialect spells "no limit": systemd's LimitMEMLOCK=, /proc/PID/limits, Podman --ulimit.
SYSTEMD_UNLIMITED = "infinity"
PROC_UNLIMITED = "unlimited"
PODMAN_UNLIMITED = "-1"
UNLIMITED_SPELLINGS = (SYSTEMD_UNLIMITED, PROC_UNLIMITED, PODMAN_UNLIMITED)


@dataclass(frozen=True)
class MemlockLimit:
    """Bytes a process may lock; None: unlimited (what a GB10 grants and NCCL wants)."""

    bytes: int | None = None

    @classmethod
    def parse(cls, text: str) -> MemlockLimit:
        """A limit as any of the dialects spells it: 'infinity', 'unlimited', '-1' or bytes."""
        word = text.strip()
        if word in UNLIMITED_SPELLINGS:
            return cls(None)
        if word.isascii() and word.isdigit():
            return cls(int(word))
        raise ValueError(f"{text!r}: want {SYSTEMD_UNLIMITED}, {PROC_UNLIMITED} or bytes")

    def systemd(self) -> str:
        """As `LimitMEMLOCK=` takes it and `systemctl show` prints it."""
        return SYSTEMD_UNLIMITED if self.bytes is None else str(self.bytes)

    def podman(self) -> str:
        """As `--ulimit memlock=` takes it: soft and hard alike."""
        value = PODMAN_UNLIMITED if self.bytes is None else str(self.bytes)
        return f"{value}:{value}"

    def proc(self) -> str:
        """As /proc/PID/limits prints it under "Max locked memory"."""
        return PROC_UNLIMITED if self.bytes is None else str(self.bytes)

    def granted_by(self, read: str) -> bool:
        """The one rule for a limit read from a node, in any dialect: it grants this one when it
        is unlimited or at least as many bytes (more never hurts NCCL). Unreadable grants
        nothing."""
        try:
            live = MemlockLimit.parse(read)
        except ValueError:
            return False
        if live.bytes is None:
            return True
        return self.bytes is not None and live.bytes >= self.bytes


UNLIMITED_MEMLOCK = MemlockLimit()
