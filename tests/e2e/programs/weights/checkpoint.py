"""A synthetic checkpoint for the weights e2e and benchmark, written on a simulated node: shards
of random bytes, an index that lays the layers over them in order (layer l in shard
l * shards // layers, as real checkpoints do), the embedding in the first and the LM head in the
last, and a config.json."""

from __future__ import annotations

import shlex

MAKE_PY = r"""
import json, os, sys
directory, layers, shards, size = sys.argv[1], *map(int, sys.argv[2:5])
os.makedirs(directory, exist_ok=True)
name = [f"model-{k + 1:05d}-of-{shards:05d}.safetensors" for k in range(shards)]
weight_map = {"model.embed_tokens.weight": name[0], "model.norm.weight": name[-1]}
weight_map["lm_head.weight"] = name[-1]
for layer in range(layers):
    weight_map[f"model.layers.{layer}.mlp.down_proj.weight"] = name[layer * shards // layers]
for shard in name:
    with open(os.path.join(directory, shard), "wb") as out:
        left = size
        while left:
            chunk = min(left, 1 << 20)
            out.write(os.urandom(chunk))
            left -= chunk
index = {"metadata": {"total_size": size * shards}, "weight_map": weight_map}
with open(os.path.join(directory, "model.safetensors.index.json"), "w") as out:
    json.dump(index, out)
with open(os.path.join(directory, "config.json"), "w") as out:
    json.dump({"num_hidden_layers": layers}, out)
print(json.dumps(weight_map))
"""


def make_command(directory: str, layers: int, shards: int, shard_bytes: int) -> str:
    """Shell command that writes the checkpoint and prints its weight_map as JSON."""
    args = shlex.join([directory, str(layers), str(shards), str(shard_bytes)])
    return f"python3 -c {shlex.quote(MAKE_PY)} {args}"
