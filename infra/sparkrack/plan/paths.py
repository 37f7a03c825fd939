"""Where things live on a node: the stack's `roles` settings joined to the service user's home.

Roles, verification and the monitoring configuration read these, never a role's own defaults.
"""

from __future__ import annotations

import posixpath

from sparkrack.stackspec import ClusterSpec, StrictModel


class MonitoringPaths(StrictModel):
    """Directories on the node (absolute), from the stack's `roles.monitoring` and the home."""

    textfile: str
    prometheus_config: str
    prometheus_data: str
    grafana: str  # provisioning/ and dashboards/ below it
    # On the head: the engine log the inference role keeps, and the directory above it that the
    # RDMA collector mounts (it exists before the engine's own directory does).
    engine_log: str
    engine_log_mount: str
    # The service user's Podman socket, as a systemd specifier path (%t: its runtime dir).
    podman_socket: str = "%t/podman/podman.sock"


class NodePaths(StrictModel):
    """Absolute directories and files on one node, for the service user."""

    model_dir: str  # the Hugging Face cache: the stack's `serving.model_dir`, else in the home
    ray_dir: str
    engine_log: str
    monitoring: MonitoringPaths


def plan_paths(spec: ClusterSpec) -> NodePaths:
    roles = spec.roles
    home = roles.base.service_user.home

    def in_home(relative: str) -> str:
        return posixpath.join(home, relative)

    engine_log = in_home(roles.inference.engine_log)
    return NodePaths(
        model_dir=spec.serving.model_dir or in_home(roles.inference.model_dir),
        ray_dir=in_home(roles.inference.ray_dir),
        engine_log=engine_log,
        monitoring=MonitoringPaths(
            textfile=in_home(roles.monitoring.textfile_dir),
            prometheus_config=in_home(roles.monitoring.prometheus_config_dir),
            prometheus_data=in_home(roles.monitoring.prometheus_data_dir),
            grafana=in_home(roles.monitoring.grafana_dir),
            engine_log=engine_log,
            engine_log_mount=in_home(roles.monitoring.engine_log_mount),
        ),
    )
