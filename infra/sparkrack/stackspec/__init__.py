"""The cluster as the user declares it: pydantic models, validation only, no I/O.

`config/load.py` turns stack config into a `ClusterSpec` (resolving catalogue names and model
files) and then runs `cross_check`, the checks that need more than one field. Arithmetic checks
(does the model fit, does TP divide the heads) belong to the planner, which raises the same
`SpecError`.

Units are in the field names or in the type: `ByteSize` fields take "121.6 GiB" (binary) or
"122 GB" (decimal) and hold bytes; bandwidth is decimal GB/s; parameter counts take "2.8T", "10B".

One module per part of the stack, as `plan/` has one per derivation; this package re-exports
them, so `from sparkrack.stackspec import ClusterSpec` reads the same from anywhere.
"""

from __future__ import annotations

from sparkrack.stackspec.base import StrictModel
from sparkrack.stackspec.checks import cross_check, deploy_needs, deploy_problems, plan_problems
from sparkrack.stackspec.cluster import ClusterSpec
from sparkrack.stackspec.fabric import Endpoint, FabricSpec
from sparkrack.stackspec.hardware import GpuAccess, HardwareProfile, NicFunction
from sparkrack.stackspec.model import LayerKind, ModelSpec
from sparkrack.stackspec.monitoring import AlertThresholds, TariffSpec
from sparkrack.stackspec.nodes import NodeSpec
from sparkrack.stackspec.roles import RolesSpec
from sparkrack.stackspec.serving import (
    KV_CACHE_DTYPE_BYTES,
    EngineBuildSpec,
    EngineSpec,
    WeightsSpec,
)

__all__ = [
    "KV_CACHE_DTYPE_BYTES",
    "AlertThresholds",
    "ClusterSpec",
    "Endpoint",
    "EngineBuildSpec",
    "EngineSpec",
    "FabricSpec",
    "GpuAccess",
    "HardwareProfile",
    "LayerKind",
    "ModelSpec",
    "NicFunction",
    "NodeSpec",
    "RolesSpec",
    "StrictModel",
    "TariffSpec",
    "WeightsSpec",
    "cross_check",
    "deploy_needs",
    "deploy_problems",
    "plan_problems",
]
