"""A safetensors checkpoint's index (`model.safetensors.index.json`: tensor -> shard) as far as
placement cares: which layers each shard holds, and whether it holds the embedding, the final
norm or LM head, or a tensor of no layer. Pure text: the head's read of the index (resources)
summarises it, and the Plan's layer-aware placement (plan.weights) reads the summary.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

INDEX_FILE = "model.safetensors.index.json"
LAYER = re.compile(r"(?:^|\.)layers\.(\d+)\.")
FIRST_STAGE_PREFIXES = ("model.embed_tokens.", "embed_tokens.", "transformer.wte.")
LAST_STAGE_PREFIXES = ("lm_head.", "model.norm.", "norm.", "transformer.ln_f.")
PLACES = ("first", "last", "every")


def shard_contents(weight_map: Mapping[str, str]) -> dict[str, dict[str, object]]:
    """shard -> what it holds, as far as placement cares: its layers, and whether it holds the
    embedding (`first`), the final norm or LM head (`last`), or a tensor of no layer (`every`).
    Small and JSON-shaped: the head reads it from the index, and Pulumi keeps it in state
    instead of a weight_map of 100,000 tensors."""
    layers: dict[str, set[int]] = {}
    kinds: dict[str, set[str]] = {}
    for tensor, shard in weight_map.items():
        layers.setdefault(shard, set())
        found = LAYER.search(tensor)
        if found:
            layers[shard].add(int(found.group(1)))
        else:
            kind = "first" if tensor.startswith(FIRST_STAGE_PREFIXES) else None
            kind = kind or ("last" if tensor.startswith(LAST_STAGE_PREFIXES) else "every")
            kinds.setdefault(shard, set()).add(kind)
    return {
        shard: {"layers": sorted(held), **{k: k in kinds.get(shard, set()) for k in PLACES}}
        for shard, held in sorted(layers.items())
    }
