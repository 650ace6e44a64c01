"""Weight bytes: kvsim's build of each shipped config against mlx-lm's own ``load_model``.

The reference is mlx-lm 0.32.2 loading a checkpoint folder: ``config.json`` plus a safetensors file whose
header lists every tensor (name, dtype, shape) of kvsim's build and whose data region is a sparse hole
(nothing is written or read: ``load_model(lazy=True)`` never evaluates). ``load_weights(strict=True)``
rejects a missing, extra or misshapen tensor, and quantized layers are found from their scales as
``load_model`` does, so the bytes compared are those of the parameters mlx-lm itself builds.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import mlx.core as mx
import pytest
from mlx.utils import tree_flatten

from kvsim.generation.config import ModelConfig, ModelConfigError, load_model_config, shipped_names
from kvsim.generation.model import build_model, weights_bytes

SAFETENSORS_DTYPES = {mx.float32: "F32", mx.float16: "F16", mx.bfloat16: "BF16", mx.uint32: "U32",
                      mx.uint8: "U8", mx.int8: "I8", mx.int32: "I32"}


def write_sparse_checkpoint(folder: Path, config: dict, tensors: dict[str, mx.array]) -> None:
    """``config.json`` and a ``model.safetensors`` whose data region is a hole of the right length."""
    header, offset = {}, 0
    for name, v in sorted(tensors.items()):
        header[name] = {"dtype": SAFETENSORS_DTYPES[v.dtype], "shape": list(v.shape),
                        "data_offsets": [offset, offset + v.nbytes]}
        offset += v.nbytes
    blob = json.dumps(header).encode()
    blob += b" " * (-len(blob) % 8)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    with open(folder / "model.safetensors", "wb") as fh:
        fh.write(struct.pack("<Q", len(blob)) + blob)
        fh.truncate(8 + len(blob) + offset)


def mlx_lm_weights_bytes(folder: Path) -> int:
    from mlx_lm.utils import load_model

    model, _ = load_model(folder, lazy=True, strict=True)
    return sum(v.nbytes for _, v in tree_flatten(model.parameters()))


def test_enough_architectures_are_shipped():
    types = {load_model_config(n).model_type for n in shipped_names()}
    assert len(shipped_names()) >= 20 and len(types) >= 20, sorted(types)


@pytest.mark.parametrize("name", shipped_names())
def test_weights_bytes_equal_mlx_lm_load_model(name: str, tmp_path: Path):
    active_before = mx.get_active_memory()  # earlier tests in this process may hold arrays
    mc = load_model_config(name)
    built = build_model(mc)
    tensors = dict(tree_flatten(built.model.parameters()))
    write_sparse_checkpoint(tmp_path / name, mc.config, tensors)
    assert built.weights_bytes == mlx_lm_weights_bytes(tmp_path / name) > 0
    assert mx.get_active_memory() - active_before < 1 << 20  # nothing of the model's size was ever allocated


def test_quantized_config_is_smaller_by_its_bits():
    full = build_model(load_model_config("llama-3.1-8b-instruct")).weights_bytes
    q4 = build_model(load_model_config("llama-3.2-1b-instruct-4bit")).weights_bytes
    q16 = build_model(load_model_config("llama-3.2-1b-instruct")).weights_bytes
    assert q4 < q16 / 3 and full > 15e9


def test_unsupported_model_type_names_it():
    with pytest.raises(ModelConfigError, match="model_type: .*'no_such_arch'"):
        build_model(ModelConfig({"model_type": "no_such_arch"}, "test"))


def test_missing_field_names_the_field():
    cfg = dict(load_model_config("qwen3-0.6b").config)
    del cfg["hidden_size"]
    with pytest.raises(ModelConfigError, match="^hidden_size: missing"):
        build_model(ModelConfig(cfg, "test"))


def test_folder_file_and_missing_config(tmp_path: Path):
    src = load_model_config("qwen3-0.6b").config
    (tmp_path / "config.json").write_text(json.dumps(src))
    assert load_model_config(str(tmp_path)).config == load_model_config(str(tmp_path / "config.json")).config
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ModelConfigError, match="no config.json"):
        load_model_config(str(empty))
    with pytest.raises(ModelConfigError, match="model: no such"):
        load_model_config("./not/here.json")


def test_weights_bytes_of_an_empty_module_is_zero():
    import mlx.nn as nn

    assert weights_bytes(nn.Module()) == 0
