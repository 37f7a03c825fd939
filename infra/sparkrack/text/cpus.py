"""A set of CPUs as one value: the kernel's cpulist ('0-4,10-14') with its spelling in each
dialect that sets or shows it and the one rule that judges a set a node reports.

The Plan holds the housekeeping and compute cores as this type; the cpu_pinning role writes them
for irqbalance and the IRQ pin unit, containers get them as Podman's --cpuset-cpus and systemd's
CPUAffinity=, and the checks and the Container resource judge what /proc prints with `holds`.
A node may print the same set as '0-4' or '0,1,2,3,4': only the set counts. In the Plan's JSON it
is its kernel spelling, as it was when the Plan held plain strings. Pure text: every room may
import it, resources and facts included.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from pydantic_core import core_schema

MASK_GROUP_BITS = 32  # /proc/irq/*/smp_affinity: hex in comma-separated 32-bit groups


@dataclass(frozen=True)
class CpuList:
    """CPU numbers, sorted and each once; empty: no CPUs (no ban, or not pinned)."""

    cpus: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "cpus", tuple(sorted(set(self.cpus))))

    @classmethod
    def of(cls, cpus: Iterable[int]) -> CpuList:
        return cls(tuple(cpus))

    @classmethod
    def parse(cls, text: str) -> CpuList:
        """A cpulist in any spelling the kernel or a person uses: '0-4,10', '0,1,2', '' (none)."""
        cpus: set[int] = set()
        for part in text.replace(" ", "").strip().split(","):
            if not part:
                continue
            first, _, last = part.partition("-")
            if not first.isdigit() or (last and not last.isdigit()):
                raise ValueError(f"{text!r} is not a CPU list like '0-4,10-14'")
            low, high = int(first), int(last or first)
            if high < low:
                raise ValueError(f"{part!r} runs backwards in CPU list {text!r}")
            cpus.update(range(low, high + 1))
        return cls.of(cpus)

    def kernel(self) -> str:
        """Ranges collapsed, as /proc's *_list files print it and taskset -c, cpusets, Podman's
        --cpuset-cpus and IRQBALANCE_BANNED_CPULIST take it; '' when empty."""
        runs: list[list[int]] = []  # [first, last] of each run of consecutive CPUs
        for cpu in self.cpus:
            if runs and cpu == runs[-1][1] + 1:
                runs[-1][1] = cpu
            else:
                runs.append([cpu, cpu])
        return ",".join(str(first) if first == last else f"{first}-{last}" for first, last in runs)

    def systemd(self) -> str:
        """As `CPUAffinity=` takes it: the same ranges, separated by spaces."""
        return self.kernel().replace(",", " ")

    def mask(self) -> str:
        """As /proc/irq/*/smp_affinity takes it: hex, in comma-separated 32-bit groups ('7c1f')."""
        text = f"{sum(1 << cpu for cpu in self.cpus):x}"
        step = MASK_GROUP_BITS // 4
        groups = [text[max(i - step, 0) : i] for i in range(len(text), 0, -step)]
        return ",".join(reversed(groups))

    def holds(self, read: str) -> bool:
        """The one rule for a cpulist read from a node: it names exactly these CPUs, however it
        is spelled. Unreadable holds nothing."""
        try:
            return CpuList.parse(read) == self
        except ValueError:
            return False

    def within(self, other: CpuList) -> bool:
        """Every one of these CPUs is one of `other`'s (an IRQ on the housekeeping cores)."""
        return set(self.cpus) <= set(other.cpus)

    def overlaps(self, other: CpuList) -> bool:
        return bool(set(self.cpus) & set(other.cpus))

    def __iter__(self) -> Iterator[int]:
        return iter(self.cpus)

    def __len__(self) -> int:
        return len(self.cpus)

    def __str__(self) -> str:
        return self.kernel()

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: Any) -> core_schema.CoreSchema:
        """In a model: read from its kernel spelling (or given as a CpuList), written as it."""
        return core_schema.no_info_plain_validator_function(
            _as_cpulist,
            json_schema_input_schema=core_schema.str_schema(),
            serialization=core_schema.plain_serializer_function_ser_schema(
                CpuList.kernel, return_schema=core_schema.str_schema()
            ),
        )


def _as_cpulist(value: object) -> CpuList:
    if isinstance(value, CpuList):
        return value
    if isinstance(value, str):
        return CpuList.parse(value)
    raise ValueError(f"{value!r} is not a CPU list like '0-4,10-14'")


NO_CPUS = CpuList()
