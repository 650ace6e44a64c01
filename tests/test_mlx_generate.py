"""kvsim's caches inside mlx-lm's own generation loop: greedy tokens equal mlx-lm's caches' tokens.

A tiny llama with random weights is built locally (no downloads) and driven through
``mlx_lm.generate.generate_step`` with a prompt of token ids; prefill chunks of 64 make the
cache grow in prefill and again in decode (offsets cross 256).
"""

from __future__ import annotations

from typing import Any

import pytest

mx = pytest.importorskip("mlx.core")
pytest.importorskip("mlx_lm")

from mlx_lm.generate import generate_step  # noqa: E402
from mlx_lm.models import cache as lm_cache  # noqa: E402
from mlx_lm.models.llama import Model, ModelArgs  # noqa: E402

from policies.mlx import PolicyKVCache, StepKVCache, make_prompt_cache  # noqa: E402

PROMPT_TOKENS, DECODE_TOKENS, CHUNK = 230, 40, 64
CONTEXT = PROMPT_TOKENS + DECODE_TOKENS


def tiny_llama(layer_types: list[str] | None = None, sliding_window: int | None = None) -> Any:
    mx.random.seed(7)
    args = ModelArgs(
        model_type="llama",
        hidden_size=128,
        num_hidden_layers=len(layer_types or [0, 0]),
        intermediate_size=256,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=64,
        rms_norm_eps=1e-5,
        vocab_size=101,
        layer_types=layer_types,
        sliding_window=sliding_window,
        tie_word_embeddings=False,  # tied random embeddings just repeat the last token
    )
    model = Model(args)
    for layer in model.layers:  # sharper attention: tokens then depend on many cached rows
        layer.self_attn.q_proj.weight = layer.self_attn.q_proj.weight * 4
        layer.self_attn.k_proj.weight = layer.self_attn.k_proj.weight * 4
    mx.eval(model.parameters())
    return model


@pytest.fixture(scope="module")
def model() -> Any:
    return tiny_llama()


@pytest.fixture(scope="module")
def prompt() -> Any:
    return mx.random.randint(0, 101, (PROMPT_TOKENS,), key=mx.random.key(3))


def greedy(model: Any, prompt: Any, cache: list[Any] | None, **kwargs: Any) -> list[int]:
    steps = generate_step(prompt, model, max_tokens=DECODE_TOKENS, prompt_cache=cache, prefill_step_size=CHUNK, **kwargs)
    return [int(tok) for tok, _ in steps]


@pytest.fixture(scope="module")
def default_tokens(model: Any, prompt: Any) -> list[int]:
    tokens = greedy(model, prompt, None)  # mlx-lm's default: KVCache per layer
    assert len(tokens) == DECODE_TOKENS and len(set(tokens)) > 10  # a non-degenerate reference
    return tokens


PLAIN = [
    {"name": "step"},
    {"name": "step", "step": 64},
    {"name": "lowpeak"},
    {"name": "prealloc", "max_size": 100},
    {"name": "geometric", "seed_rows": 32, "factor": 2},
    {"name": "geometric", "seed_rows": 32, "cap": "context"},
    {"name": "full"},
]


@pytest.mark.parametrize("policy", PLAIN, ids=lambda p: "-".join(map(str, p.values())))
def test_greedy_tokens_match_default_cache(model: Any, prompt: Any, default_tokens: list[int], policy: dict[str, Any]) -> None:
    cache = make_prompt_cache(model, policy=policy, max_context=CONTEXT)
    assert all(isinstance(c, PolicyKVCache) and c.policy.name == policy["name"] for c in cache)
    assert greedy(model, prompt, cache) == default_tokens
    assert all(c.offset == CONTEXT for c in cache)  # generate_step runs one step ahead of what it yields


def test_rotating_matches_mlx_lm_rotating(model: Any, prompt: Any) -> None:
    ref = greedy(model, prompt, [lm_cache.RotatingKVCache(max_size=96, keep=4) for _ in model.layers])
    ours = make_prompt_cache(model, policy={"name": "rotating", "max_size": 96, "keep": 4})
    assert greedy(model, prompt, ours) == ref


def test_quantized_matches_mlx_lm_quantized(model: Any, prompt: Any) -> None:
    ref = greedy(model, prompt, [lm_cache.QuantizedKVCache(group_size=64, bits=8) for _ in model.layers])
    ours = make_prompt_cache(model, policy={"name": "quantized", "bits": 8, "group_size": 64})
    assert greedy(model, prompt, ours) == ref


def test_model_sliding_window_caches_are_kept(prompt: Any) -> None:
    swa = tiny_llama(["sliding_attention", "full_attention", "sliding_attention"], sliding_window=48)
    cache = make_prompt_cache(swa, policy={"name": "lowpeak"})
    assert [type(c) for c in cache] == [lm_cache.RotatingKVCache, type(cache[1]), lm_cache.RotatingKVCache]
    assert cache[1].policy.name == "lowpeak"
    assert greedy(swa, prompt, cache) == greedy(swa, prompt, None)


def test_default_policy_is_mlx_lm_step(model: Any) -> None:
    cache = make_prompt_cache(model)
    assert len(cache) == len(model.layers) and all(type(c) is StepKVCache for c in cache)


@pytest.mark.parametrize("policy", [{"name": "step"}, {"name": "lowpeak"}])
def test_kv_bits_quantizes_like_mlx_lm(model: Any, prompt: Any, policy: dict[str, Any]) -> None:
    quant = {"kv_bits": 8, "kv_group_size": 64, "quantized_kv_start": 100}
    ref_cache = [lm_cache.KVCache() for _ in model.layers]
    ours = make_prompt_cache(model, policy=policy)
    assert greedy(model, prompt, ours, **quant) == greedy(model, prompt, ref_cache, **quant)
    assert all(type(a).__name__ == "QuantizedPolicyKVCache" and a.offset == b.offset for a, b in zip(ours, ref_cache))
