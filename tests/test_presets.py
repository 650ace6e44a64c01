"""Model presets: load, cite a source, match their documented layouts and mlx-lm's own
per-layer cache choice, and parse as contract ``{"preset": name}`` models."""

from __future__ import annotations

import json

import pytest
from mlx_lm.models import gemma3_text, gpt_oss, qwen3_5
from mlx_lm.models.cache import KVCache, RotatingKVCache

from kvsim.scenario.footprint import full_bytes_per_token
from kvsim.scenario.parse import ScenarioError, parse_scenario
from kvsim.scenario.presets import MODELS_DIR, PRESET_NAMES, load_preset

# name: (KV-cache layers, window layers, window rows, K+V bytes per token of the growing layers)
DOCUMENTED = {
    "deepseek-v4-flash": (41, 0, None, 21 * 1536 / 4 + 20 * 1024 / 128),  # ds4: one latent + the ratio-4 indexer
    "llama-3.1-8b": (32, 0, None, 131_072),
    "qwen3.5-122b-a10b": (12, 0, None, 24_576),
    "gpt-oss-20b": (24, 12, 128, 24_576),
    "gemma-3-27b": (62, 52, 1024, 81_920),
}


def test_every_shipped_preset_is_documented():
    assert set(PRESET_NAMES) == set(DOCUMENTED)


@pytest.mark.parametrize("name", sorted(DOCUMENTED))
def test_preset_loads_with_source_notes_and_documented_layout(name):
    doc = json.loads((MODELS_DIR / f"{name}.json").read_text())
    model = load_preset(name)
    assert model.name == doc["name"] == name
    assert model.source.strip() and model.notes.strip()
    n_layers, n_window, window_rows, per_token = DOCUMENTED[name]
    assert model.n_layers == n_layers
    assert sum(1 for x in model.layers if x.window_rows is not None) == n_window
    assert {x.window_rows for x in model.layers} - {None} == ({window_rows} if window_rows else set())
    assert full_bytes_per_token(model) == per_token


@pytest.mark.parametrize("name", sorted(DOCUMENTED))
def test_preset_parses_as_a_contract_model(name):
    scenario = parse_scenario(
        {
            "id": name,
            "model": {"preset": name},
            "policy": {"name": "geometric", "seed_rows": 4096, "cap": "context", "slack_rows": 2},
            "workload": {"prompt_tokens": 4096, "prefill_chunk": 1024, "decode_tokens": 16},
        }
    )
    assert scenario.model == load_preset(name)
    json.dumps(scenario.to_dict())


def test_unknown_preset_is_a_one_line_error():
    with pytest.raises(ScenarioError, match=r"^model\.preset: unknown preset") as info:
        parse_scenario(
            {
                "id": 1,
                "model": {"preset": "nope"},
                "policy": {"name": "step"},
                "workload": {"prompt_tokens": 1, "prefill_chunk": 1},
            }
        )
    assert "\n" not in str(info.value)


def test_deepseek_v4_flash_layers_2_to_42_alternate_ratio_4_and_128():
    layers = load_preset("deepseek-v4-flash").layers
    for il, layer in enumerate(layers, start=2):
        assert (layer.kv_heads, layer.head_dim, layer.dtype) == (1, 512, "float16")
        assert layer.row_bytes == 1024
        if il % 2 == 0:
            assert (layer.ratio, layer.extra_row_bytes) == (4, 512)
        else:
            assert (layer.ratio, layer.extra_row_bytes) == (128, 0)


def _full_attention_indices(caches) -> list[int]:
    return [i for i, c in enumerate(caches) if type(c) is KVCache]


def test_gemma_3_27b_matches_mlx_lm_make_cache():
    args = gemma3_text.ModelArgs.from_dict(
        {
            "model_type": "gemma3_text",
            "hidden_size": 8,
            "num_hidden_layers": 62,
            "intermediate_size": 8,
            "num_attention_heads": 2,
            "head_dim": 4,
            "rms_norm_eps": 1e-6,
            "vocab_size": 16,
            "num_key_value_heads": 1,
            "sliding_window": 1024,
            "sliding_window_pattern": 6,
        }
    )
    caches = gemma3_text.Model(args).make_cache()
    preset = load_preset("gemma-3-27b").layers
    assert _full_attention_indices(caches) == [i for i, x in enumerate(preset) if x.window_rows is None]
    assert {c.max_size for c in caches if isinstance(c, RotatingKVCache)} == {1024}


def test_gpt_oss_20b_matches_mlx_lm_make_cache():
    args = gpt_oss.ModelArgs(
        num_hidden_layers=24,
        num_local_experts=2,
        num_experts_per_tok=1,
        vocab_size=16,
        hidden_size=8,
        intermediate_size=8,
        head_dim=4,
        num_attention_heads=2,
        num_key_value_heads=1,
        sliding_window=128,
    )
    caches = gpt_oss.Model(args).make_cache()
    preset = load_preset("gpt-oss-20b").layers
    assert _full_attention_indices(caches) == [i for i, x in enumerate(preset) if x.window_rows is None]
    assert {c.max_size for c in caches if isinstance(c, RotatingKVCache)} == {128}


def test_qwen3_5_keeps_kv_on_every_fourth_of_48_layers():
    text = {
        "model_type": "qwen3_5_text",
        "hidden_size": 8,
        "num_hidden_layers": 48,
        "intermediate_size": 8,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "head_dim": 4,
        "rms_norm_eps": 1e-6,
        "vocab_size": 16,
        "linear_num_value_heads": 2,
        "linear_num_key_heads": 1,
        "linear_key_head_dim": 4,
        "linear_value_head_dim": 4,
        "full_attention_interval": 4,
        "tie_word_embeddings": False,
    }
    caches = qwen3_5.Model(qwen3_5.ModelArgs.from_dict({"model_type": "qwen3_5", "text_config": text})).make_cache()
    kv = _full_attention_indices(caches)
    assert kv == list(range(3, 48, 4))
    assert len(kv) == load_preset("qwen3.5-122b-a10b").n_layers
