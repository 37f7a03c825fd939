"""The monitoring images of the simulated stacks, built here from Debian trixie packages.

No registry is reachable, so the monitoring role's images are built like the node image:

- prometheus (`localhost/sparkrack/prometheus`): debootstrap minbase + Debian's `prometheus`
  package, i.e. /usr/bin/prometheus and /usr/bin/promtool. It is the rootfs image itself.
- exporters (`localhost/sparkrack/exporters`): a minbase rootfs with `prometheus-node-exporter`
  (/usr/bin/prometheus-node-exporter) and python3, then a thin `podman build` layer adding
  /usr/local/bin/cadvisor (built by tools/cadvisor/ensure-cadvisor from the Go module proxy) and
  /opt/sparkrack/{gpu_exporter,rdma_textfile}.py (roles/monitoring/files).

Each is tagged by a digest of what makes it (the recipe; for exporters also the two scripts and
the cAdvisor build key, which names its Go sources and toolchain), so a change to any of them
names a new image and an unchanged one is found with one `podman image exists`. Both are also
tagged `latest`, the names the simulated stacks declare.

How the exporters run, rootless as the service user on a (simulated) node, all host network
(tests/e2e/test_monitoring_images.py runs exactly these and says why each option is there):

    node-exporter  -v /:/host:ro,rslave -v TEXTFILE_DIR:/textfile:ro --pid host
        prometheus-node-exporter --path.rootfs=/host --web.listen-address=:9100
        --collector.textfile.directory=/textfile --collector.disable-defaults --collector.cpu ...
    GPU exporter   -v /usr/bin/nvidia-smi:/usr/bin/nvidia-smi:ro
                   -v /proc/meminfo:/host/proc/meminfo:ro
        python3 /opt/sparkrack/gpu_exporter.py --listen-address :9835
        --nvidia-smi /usr/bin/nvidia-smi --meminfo /host/proc/meminfo
    RDMA collector -v /sys/class/infiniband:/sys/class/infiniband:ro -v TEXTFILE_DIR:/textfile
        python3 /opt/sparkrack/rdma_textfile.py --sysfs /sys/class/infiniband
        --output /textfile/rdma.prom --interval 5
    cAdvisor       -v /sys/fs/cgroup:/sys/fs/cgroup:ro,rslave -v /etc/machine-id:/etc/machine-id:ro
                   -v $XDG_RUNTIME_DIR/podman/podman.sock:/run/podman/podman.sock
        /usr/local/bin/cadvisor --port=8080 --podman=unix:///run/podman/podman.sock
        --housekeeping_interval=10s
      (the user's socket: `systemctl --user enable --now podman.socket`, lingering user.)
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path

from sparkrack.config.cache import cache_root
from sparkrack.sim.images import (
    IMAGE_REPOSITORY,
    RootfsRecipe,
    build_lock,
    ensure_rootfs_image,
    podman_image_exists,
)
from sparkrack.sim.shell import Progress, SimError, run, timed_step
from sparkrack.sim.standin.image import podman_ulimit_args

PROMETHEUS_REPOSITORY = f"{IMAGE_REPOSITORY}/prometheus"
EXPORTERS_REPOSITORY = f"{IMAGE_REPOSITORY}/exporters"
PROMETHEUS_LATEST = f"{PROMETHEUS_REPOSITORY}:latest"
EXPORTERS_LATEST = f"{EXPORTERS_REPOSITORY}:latest"

REPO = Path(__file__).resolve().parents[3]
SCRIPTS = (
    REPO / "roles" / "monitoring" / "files" / "gpu_exporter.py",
    REPO / "roles" / "monitoring" / "files" / "rdma_textfile.py",
)
ENSURE_CADVISOR = REPO / "tools" / "cadvisor" / "ensure-cadvisor"
CADVISOR_BUILD_TIMEOUT_S = 1800.0

PROMETHEUS_RECIPE = RootfsRecipe(
    suite="trixie",
    variant="minbase",
    packages=("prometheus",),
    changes=(
        "WORKDIR /prometheus",
        'CMD ["/usr/bin/prometheus", "--config.file=/etc/prometheus/prometheus.yml", '
        '"--storage.tsdb.path=/prometheus", "--web.listen-address=:9090"]',
    ),
)
EXPORTERS_BASE_RECIPE = RootfsRecipe(
    suite="trixie",
    variant="minbase",
    # python3, not python3-minimal: the scripts use http.server and csv, which -minimal lacks.
    packages=("prometheus-node-exporter", "python3"),
)
# The thin layer over the base: only COPY, and a RUN that proves every program starts.
EXPORTERS_CONTAINERFILE = """\
ARG BASE
FROM ${BASE}
COPY cadvisor /usr/local/bin/cadvisor
COPY gpu_exporter.py rdma_textfile.py /opt/sparkrack/
RUN chmod 0755 /usr/local/bin/cadvisor /opt/sparkrack/gpu_exporter.py \
      /opt/sparkrack/rdma_textfile.py \
 && prometheus-node-exporter --version \
 && /usr/local/bin/cadvisor --version \
 && python3 /opt/sparkrack/gpu_exporter.py --help >/dev/null \
 && python3 /opt/sparkrack/rdma_textfile.py --help >/dev/null
LABEL org.opencontainers.image.title="sparkrack exporters: node-exporter, cAdvisor, GPU, RDMA"
"""


def ensure_monitoring_images(progress: Progress) -> dict[str, str]:
    """Both images, built only when Podman lacks them, each also tagged `latest`:
    {"prometheus": ref, "exporters": ref}."""
    prometheus = ensure_rootfs_image("prometheus", PROMETHEUS_RECIPE, progress)
    run(["podman", "tag", prometheus, PROMETHEUS_LATEST], what="tag of the prometheus image")
    exporters = ensure_exporters_image(progress)
    remove_superseded(PROMETHEUS_REPOSITORY, prometheus)
    remove_superseded(EXPORTERS_REPOSITORY, exporters)
    return {"prometheus": prometheus, "exporters": exporters}


def remove_superseded(repository: str, reference: str) -> None:
    """Drop the repository's images built from older sources, so that editing a script does not
    pile up images. One a container still uses stays (podman refuses), which is what we want."""
    listing = ["podman", "images", "--format", "{{.Repository}}:{{.Tag}}", repository]
    names = run(listing, what=f"list of {repository} images").stdout.split()
    for name in set(names) - {reference, f"{repository}:latest"}:
        run(["podman", "rmi", name], what=f"removal of {name}", check=False)


def ensure_exporters_image(progress: Progress) -> str:
    cadvisor = ensure_cadvisor(progress)
    reference = f"{EXPORTERS_REPOSITORY}:{exporters_key(cadvisor)[:12]}"
    if not podman_image_exists(reference):
        with build_lock(cache_root() / "images" / f"exporters-{reference.rsplit(':', 1)[1]}"):
            if not podman_image_exists(reference):
                build_exporters(reference, cadvisor, progress)
    run(["podman", "tag", reference, EXPORTERS_LATEST], what="tag of the exporters image")
    return reference


def ensure_cadvisor(progress: Progress) -> Path:
    """The cached cAdvisor binary; its directory's name is its build key
    (`cadvisor-<version>-<hash of its sources, script and Go version>`)."""
    if shutil.which("go") is None:
        raise SimError("image exporters: cAdvisor is built with Go, and no `go` is on PATH")
    env = {"SPARKRACK_CACHE": str(cache_root())}
    with timed_step(progress, "image exporters: cAdvisor binary (tools/cadvisor)"):
        done = run(
            [str(ENSURE_CADVISOR)],
            what="image exporters: tools/cadvisor/ensure-cadvisor",
            env=env,
            timeout=CADVISOR_BUILD_TIMEOUT_S,
        )
    return Path(done.stdout.strip().splitlines()[-1])


def exporters_key(cadvisor: Path) -> str:
    """What the exporters image is made of: a change to any part names a new image."""
    digest = hashlib.sha256()
    parts = [
        EXPORTERS_CONTAINERFILE.encode(),
        EXPORTERS_BASE_RECIPE.digest().encode(),
        cadvisor.parent.name.encode(),
        *(script.read_bytes() for script in SCRIPTS),
    ]
    for part in parts:
        digest.update(hashlib.sha256(part).digest())
    return digest.hexdigest()


def build_exporters(reference: str, cadvisor: Path, progress: Progress) -> None:
    base = ensure_rootfs_image("exporters-base", EXPORTERS_BASE_RECIPE, progress)
    with tempfile.TemporaryDirectory(prefix="exporters-build-") as context:
        (Path(context) / "Containerfile").write_text(EXPORTERS_CONTAINERFILE)
        shutil.copy(cadvisor, Path(context) / "cadvisor")
        for script in SCRIPTS:
            shutil.copy(script, Path(context) / script.name)
        with timed_step(progress, f"image exporters: podman build {reference}"):
            run(podman_build_args(base, reference, context), what="image exporters: podman build")


def podman_build_args(base: str, reference: str, context: str) -> list[str]:
    return [
        "podman", "build", "--runtime", "runc", "--pull=never", "--network", "none",
        *podman_ulimit_args(),
        "--build-arg", f"BASE={base}",
        "--tag", reference,
        "--file", os.path.join(context, "Containerfile"),
        context,
    ]  # fmt: skip
