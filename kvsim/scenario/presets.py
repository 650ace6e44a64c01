"""Model presets shipped in ``kvsim/data/models/<name>.json``, each citing its public source."""

from __future__ import annotations

import json
from functools import cache

from kvsim.core.paths import MODELS_DIR
from kvsim.scenario.spec import LayerSpec, ModelSpec

PRESET_NAMES: tuple[str, ...] = tuple(sorted(p.stem for p in MODELS_DIR.glob("*.json")))
_LAYER_KEYS = ("kv_heads", "head_dim", "dtype", "ratio", "window_rows", "extra_row_bytes")


@cache
def load_preset(name: str) -> ModelSpec:
    """Load a preset. A ``layers`` entry may carry ``count`` to repeat it."""
    doc = json.loads((MODELS_DIR / f"{name}.json").read_text())
    layers: list[LayerSpec] = []
    for entry in doc["layers"]:
        layer = LayerSpec(**{k: entry[k] for k in _LAYER_KEYS if k in entry})
        layers.extend([layer] * int(entry.get("count", 1)))
    return ModelSpec(name=doc["name"], layers=tuple(layers), source=doc.get("source", ""), notes=doc.get("notes", ""),
                     kv_buffers=int(doc.get("kv_buffers", 2)))
