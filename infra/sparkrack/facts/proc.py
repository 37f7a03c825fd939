"""What the kernel says of a process and of the NIC's interrupts (/proc): the cores a process
may run on, the memlock it really got, which IRQs a driver holds and the cores each one
may interrupt."""

from __future__ import annotations

import shlex

from sparkrack.facts import Fact


def parse_status(stdout: str) -> dict[str, str]:
    """/proc/PID/status: `Name:\\tvalue` lines."""
    return {
        k.strip(): v.strip() for k, _, v in (line.partition(":") for line in stdout.splitlines())
    }


def parse_cpus_allowed(stdout: str) -> str:
    """The status's Cpus_allowed_list ('4-19'), '' when the process is gone."""
    return parse_status(stdout).get("Cpus_allowed_list", "")


def cpus_allowed(pid: int) -> Fact[str]:
    # Gone between the inspect and this read: no list, not an error.
    status = shlex.quote(f"/proc/{int(pid)}/status")
    return Fact(f"cat {status} 2>/dev/null || true", parse_cpus_allowed)


def parse_memlock(stdout: str) -> tuple[str, str]:
    """(soft, hard) of `Max locked memory` in /proc/PID/limits."""
    for line in stdout.splitlines():
        if line.startswith("Max locked memory"):
            soft, hard = line.split()[3:5]
            return soft, hard
    raise ValueError("no 'Max locked memory' line")


def memlock(pid: int) -> Fact[tuple[str, str]]:
    return Fact(f"cat {shlex.quote(f'/proc/{int(pid)}/limits')}", parse_memlock)


def parse_irqs(stdout: str, driver: str = "mlx5") -> list[str]:
    """IRQ numbers of the driver's lines of /proc/interrupts (ConnectX: mlx5)."""
    return [
        line.split(":")[0].strip()
        for line in stdout.splitlines()
        if driver in line and line.split(":")[0].strip().isdigit()
    ]


def nic_irqs() -> Fact[list[str]]:
    return Fact("cat /proc/interrupts", parse_irqs)


def parse_irq_affinity(stdout: str) -> str:
    """The cores an IRQ may be delivered to ('0-3'), '' when the IRQ is gone."""
    return stdout.strip()


def irq_affinity(irq: int) -> Fact[str]:
    # Freed between reading /proc/interrupts and this read: no cores, not an error.
    path = shlex.quote(f"/proc/irq/{int(irq)}/smp_affinity_list")
    return Fact(f"cat {path} 2>/dev/null || true", parse_irq_affinity)
