"""The simulated GB10 node's image: Debian with systemd, sshd, Podman, Prometheus, and the fakes.

Debian trixie, not bookworm: the product deploys Quadlet units, which need Podman >= 4.4, and
bookworm ships 4.3.1. trixie's systemd 257 refuses a cgroup v1/hybrid host unless forced; the
node container passes the force on its own command line (see `cluster.node_init_command`).

Nothing cluster-specific is baked in: host keys, the login key and the RDMA sysfs tree are
mounted per cluster, so one image serves every stack.
"""

from __future__ import annotations

from pathlib import Path

from sparkrack.sim.images import MIRROR, RootfsRecipe
from sparkrack.sim.nvidia_smi import DRIVER_VERSION
from sparkrack.sim.topology import NetworkStack

SUITE = "trixie"
# The owner's login, as on a fresh DGX OS / Ubuntu box: an account with sudo holding the
# subordinate ids useradd gives a distribution's first user (SUB_UID_MIN 100000, 65536 of them).
# No service user: `up` creates it, as on every real rack (issue 31).
LOGIN_USER = "ubuntu"
LOGIN_SUBIDS = "100000-165535"
# Where `cluster` mounts the per-node files; /run and /tmp are tmpfs under systemd, so not there.
SIM_MOUNT_DIR = "/opt/sparkrack-sim"
SSH_DIR = "/etc/ssh/sparkrack-sim"

PACKAGES = (
    "systemd",
    "systemd-sysv",
    "dbus",
    "libpam-systemd",
    "dbus-user-session",
    "openssh-server",
    "iproute2",
    "iputils-ping",
    "linux-sysctl-defaults",  # ping_group_range: unprivileged ping, as on Ubuntu
    "iputils-arping",
    "ethtool",
    "procps",
    "curl",
    "ca-certificates",
    "podman",
    "runc",
    "uidmap",
    "fuse-overlayfs",
    "python3",
    "python3-venv",  # the base role's: where python3 lacks huggingface_hub, a venv gets it
    "sudo",
    "prometheus",
    "prometheus-node-exporter",
    "busybox-static",
    # What the base role installs on a real node; the sim has no route to a mirror, so they are
    # baked in and the role finds nothing missing.
    "rdma-core",
    "infiniband-diags",
    "perftest",
    "numactl",
    "irqbalance",
    "chrony",
    "nftables",
)

# The head's download runs huggingface_hub. trixie does not package it; forky does (1.23.0-1,
# architecture all, every dependency in trixie). With it in the system's python3 the download
# uses it as it would a distribution's own package, and never asks PyPI, which a simulated node
# cannot reach. forky is a source for that one install only: pinned below trixie so that nothing
# else comes from it, without the Valid-Until check (the mirror's testing suite may be older
# than a week; its signature is still checked), and removed from the image afterwards.
FROM_FORKY = ("python3-huggingface-hub",)
FORKY_LIST = "/etc/apt/sources.list.d/sparkrack-forky.list"
FORKY_PIN = "/etc/apt/preferences.d/sparkrack-forky"
FORKY_INSTALL = (
    f"echo 'deb [check-valid-until=no] {MIRROR} forky main' > {FORKY_LIST}",
    f"printf 'Package: *\\nPin: release n=forky\\nPin-Priority: 100\\n' > {FORKY_PIN}",
    "apt-get update -qq",
    "apt-get install -y -qq --no-install-recommends " + " ".join(f"{p}/forky" for p in FROM_FORKY),
    f"rm -f {FORKY_LIST} {FORKY_PIN}",
)

SSHD_CONFIG = f"""\
# Keys are generated per simulated cluster and mounted read-only into {SSH_DIR}.
HostKey {SSH_DIR}/ssh_host_ed25519_key
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin no
AuthorizedKeysFile .ssh/authorized_keys
# The cluster's login key opens the owner's login only: every other account (the service user
# among them) is reached as on a real box, by its own authorized_keys or by sudo.
Match User {LOGIN_USER}
    AuthorizedKeysFile .ssh/authorized_keys {SSH_DIR}/authorized_keys
Match all
"""

SUDOERS = f"{LOGIN_USER} ALL=(ALL) NOPASSWD:ALL\n"

# uverbs majors/minors as on a real host, so `ls -l` and `podman run --device` look right; no
# driver stands behind them, so opening one fails as it would with the driver unloaded.
INFINIBAND_TMPFILES = """\
d /dev/infiniband 0755 root root -
c /dev/infiniband/uverbs0 0666 root root - 231:192
c /dev/infiniband/uverbs1 0666 root root - 231:193
c /dev/infiniband/uverbs2 0666 root root - 231:194
c /dev/infiniband/uverbs3 0666 root root - 231:195
c /dev/infiniband/rdma_cm 0666 root root - 10:122
"""

# The GPU's device nodes as the NVIDIA driver makes them (nvidia-uvm's major is dynamic; this is
# a typical one). Nothing drives them: CUDA and nvidia-smi stand-ins look only for them, and a
# container has them only when its CDI device gave them.
NVIDIA_TMPFILES = """\
c /dev/nvidia0 0666 root root - 195:0
c /dev/nvidiactl 0666 root root - 195:255
c /dev/nvidia-modeset 0666 root root - 195:254
c /dev/nvidia-uvm 0666 root root - 509:0
c /dev/nvidia-uvm-tools 0666 root root - 509:1
"""
# The driver's user-space libraries, by their versioned names: what nvidia-ctk reads the driver's
# version from and mounts into a container. Stand-ins holding a line of text, not libraries.
DRIVER_LIBRARIES = ("libcuda.so", "libnvidia-ml.so", "libnvidia-ptxjitcompiler.so")
FAKE_LIBRARIES = (
    "lib=$(ls -d /usr/lib/*-linux-gnu | head -n 1); for name in "
    + " ".join(f"{name}.{DRIVER_VERSION}" for name in DRIVER_LIBRARIES)
    + '; do echo "sparkrack sim: a stand-in, not NVIDIA\'s library" > "$lib/$name"; done'
)

# sysfs has neither /sys/class/infiniband nor /sys/module/nvidia without the drivers, and no
# directory can be created in sysfs, so each fake gets a mount point by laying a tmpfs over its
# parent (/sys/class, /sys/module) and binding every real entry back into it. (Not /proc: nothing
# may be mounted over it, or the kernel refuses the service user's rootless Podman a fresh proc.)
# Runs once per boot, before anything reads them.
SYSFS_SCRIPT = f"""\
#!/bin/sh
set -eu
[ -d /sys/class/infiniband ] && exit 0
overlay() {{  # a tmpfs over sysfs directory $1, its entries bound back
  real=/run/sparkrack-sim/sys-$(basename "$1")
  mkdir -p "$real"
  mount --bind "$1" "$real"
  mount -t tmpfs -o mode=0755 "sparkrack-sim-$(basename "$1")" "$1"
  for entry in "$real"/*; do
    mkdir "$1/${{entry##*/}}"
    mount --bind "$entry" "$1/${{entry##*/}}"
  done
}}
overlay /sys/class
mkdir /sys/class/infiniband
mount --bind {SIM_MOUNT_DIR}/infiniband /sys/class/infiniband
mount -o remount,bind,ro /sys/class/infiniband
overlay /sys/module
mkdir /sys/module/nvidia
echo {DRIVER_VERSION} > /sys/module/nvidia/version
mount -o remount,ro /sys/module
"""


# irqbalance as on a real node (it starts, reads its ban from /etc/default/irqbalance, restarts
# when that changes), except for what the host must be spared: Debian's unit skips containers
# (ConditionVirtualization=!container; an empty assignment drops its conditions), and it may
# write /proc/irq (the host's IRQs, a privileged node shares them): read-only here.
IRQBALANCE_DROP_IN = """\
[Unit]
ConditionVirtualization=
[Service]
ReadWritePaths=
ReadOnlyPaths=/proc/irq
"""


def boot_oneshot_unit(description: str, script: str, ordering: str) -> str:
    """A unit that runs `script` once per boot, early, before the system's own services."""
    return (
        f"[Unit]\nDescription=sparkrack sim: {description}\nDefaultDependencies=no\n{ordering}\n"
        f"[Service]\nType=oneshot\nRemainAfterExit=yes\nExecStart={script}\n\n"
        "[Install]\nWantedBy=sysinit.target\n"
    )


SYSFS_UNIT = boot_oneshot_unit(
    "fake sysfs: the RDMA tree at /sys/class/infiniband, the nvidia module's version",
    "/usr/local/sbin/sparkrack-sim-sysfs",
    "Before=sysinit.target systemd-udevd.service\n"
    f"ConditionPathExists={SIM_MOUNT_DIR}/infiniband\n",
)

# A fresh Debian/Ubuntu install lists its own name; sudo complains on every call without it.
HOSTNAME_SCRIPT = """\
#!/bin/sh
name=$(hostname)
grep -q "[[:space:]]$name\\$" /etc/hosts || printf '127.0.1.1 %s\\n' "$name" >>/etc/hosts
"""

HOSTNAME_UNIT = boot_oneshot_unit(
    "the node's own name in /etc/hosts",
    "/usr/local/sbin/sparkrack-sim-hostname",
    "After=local-fs.target\nBefore=sysinit.target\n",
)

JOURNALD = "[Journal]\nStorage=volatile\nRuntimeMaxUse=16M\n"
# DGX OS grants every service, SSH's sessions among them, 8 MiB of locked memory and NCCL wants
# it unlimited, so the base role's drop-in raises the service user's manager and restarts it.
# This machine cannot raise a hard limit above 8 MiB (no CAP_SYS_RESOURCE), so gb10-sim plans
# 8 MiB; services here start below that, at systemd's old default, so the same drop-in and
# restart run as on a GB10, and an SSH session sits below the engine's containers as it does
# there (text/commands.podman_exec is why that matters).
SERVICE_MEMLOCK = "[Manager]\nDefaultLimitMEMLOCK=64K\n"
HOSTS = "127.0.0.1 localhost\n::1 localhost ip6-localhost ip6-loopback\n"
# Podman 5 warns on every call on a cgroup v1 host; the warning is about the host, not the node.
# Sessions read it from /etc/environment (pam_env), user managers from environment.d.
ENVIRONMENT = "PODMAN_IGNORE_CGROUPSV1_WARNING=1\n"

DISABLED_UNITS = (
    "prometheus.service",
    "prometheus-node-exporter.service",
    "apt-daily.timer",
    "apt-daily-upgrade.timer",
    "fstrim.timer",
    "e2scrub_all.timer",
    # A privileged node shares the host's clock: chronyd must not step it. Its package is
    # present, as the base role expects. (irqbalance runs, as on a real node: IRQBALANCE_DROP_IN.)
    "chrony.service",
)
# Nothing to load in a container; it fails and would make the system `degraded`.
MASKED_UNITS = ("systemd-modules-load.service",)

CHROOT_COMMANDS = (
    "; ".join(FORKY_INSTALL),
    "rm -f /etc/ssh/ssh_host_*",
    f"id {LOGIN_USER} >/dev/null 2>&1 || useradd --create-home --shell /bin/bash {LOGIN_USER}",
    f"grep -q '^{LOGIN_USER}:' /etc/subuid || usermod --add-subuids {LOGIN_SUBIDS} "
    f"--add-subgids {LOGIN_SUBIDS} {LOGIN_USER}",
    f"install -d -m 0700 -o {LOGIN_USER} -g {LOGIN_USER} /home/{LOGIN_USER}/.ssh",
    "for unit in " + " ".join(DISABLED_UNITS) + "; do systemctl disable $unit 2>/dev/null || :; "
    "done",
    "systemctl mask " + " ".join(MASKED_UNITS),
    "systemctl enable sparkrack-sim-sysfs.service sparkrack-sim-hostname.service",
    FAKE_LIBRARIES,
    f"install -d -m 0755 {SIM_MOUNT_DIR}/infiniband {SSH_DIR}",
)


def script(name: str) -> str:
    """A stand-in's source beside this module (nvidia_smi.py, nvidia_ctk.py, ib_write_bw.py)."""
    return Path(__file__).with_name(name).read_text()


# What a node of each network stack adds to Debian's: netplan.io, as Ubuntu and DGX OS have it.
STACK_PACKAGES: dict[NetworkStack, tuple[str, ...]] = {"networkd": (), "netplan": ("netplan.io",)}


def node_image_name(network_stack: NetworkStack) -> str:
    return "node" if network_stack == "networkd" else f"node-{network_stack}"


def node_recipe(network_stack: NetworkStack = "networkd") -> RootfsRecipe:
    files = (
        ("/usr/bin/nvidia-smi", script("nvidia_smi.py"), 0o755),
        ("/usr/bin/nvidia-ctk", script("nvidia_ctk.py"), 0o755),
        ("/usr/bin/ib_write_bw", script("ib_write_bw.py"), 0o755),  # over perftest's: no HCA
        ("/etc/tmpfiles.d/sparkrack-sim-nvidia.conf", NVIDIA_TMPFILES, 0o644),
        ("/etc/ssh/sshd_config.d/sparkrack-sim.conf", SSHD_CONFIG, 0o644),
        (f"/etc/sudoers.d/{LOGIN_USER}", SUDOERS, 0o440),
        ("/etc/tmpfiles.d/sparkrack-sim-infiniband.conf", INFINIBAND_TMPFILES, 0o644),
        ("/usr/local/sbin/sparkrack-sim-sysfs", SYSFS_SCRIPT, 0o755),
        ("/etc/systemd/system/sparkrack-sim-sysfs.service", SYSFS_UNIT, 0o644),
        ("/usr/local/sbin/sparkrack-sim-hostname", HOSTNAME_SCRIPT, 0o755),
        ("/etc/systemd/system/sparkrack-sim-hostname.service", HOSTNAME_UNIT, 0o644),
        ("/etc/systemd/journald.conf.d/sparkrack-sim.conf", JOURNALD, 0o644),
        ("/etc/systemd/system.conf.d/sparkrack-sim-memlock.conf", SERVICE_MEMLOCK, 0o644),
        ("/etc/systemd/system/irqbalance.service.d/sparkrack-sim.conf", IRQBALANCE_DROP_IN, 0o644),
        ("/etc/hosts", HOSTS, 0o644),
        ("/etc/environment", ENVIRONMENT, 0o644),
        ("/etc/environment.d/90-sparkrack-sim.conf", ENVIRONMENT, 0o644),
    )
    return RootfsRecipe(
        suite=SUITE,
        variant="minbase",
        packages=PACKAGES + STACK_PACKAGES[network_stack],
        chroot_commands=CHROOT_COMMANDS,
        files=files,
        changes=('CMD ["/sbin/init"]',),
    )
