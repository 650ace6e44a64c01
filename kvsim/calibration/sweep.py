"""The built-in calibration sweeps: contract scenarios with stable ids and a train/validation split."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from kvsim.scenario.parse import Scenario, ScenarioError, before_layer_model, parse_scenario
from kvsim.scenario.spec import DTYPE_BYTES

VALIDATION_SLOTS = (1, 3)  # within each policy, ordinals i with i % 5 in these go to validation (40 %)

M12 = {"n_layers": 12, "kv_heads": 8, "head_dim": 128, "dtype": "float16"}


@dataclass(frozen=True, slots=True)
class SweepItem:
    """One calibration scenario and the split (``train`` / ``validation``) it belongs to."""

    scenario: Scenario
    split: str


def _w(prompt: int, chunk: int, decode: int, batch: int = 1) -> dict[str, int]:
    return {"prompt_tokens": prompt, "prefill_chunk": chunk, "decode_tokens": decode, "batch": batch}


def _u(n_layers: int, kv_heads: int, head_dim: int, dtype: str = "float16") -> dict[str, Any]:
    return {"n_layers": n_layers, "kv_heads": kv_heads, "head_dim": head_dim, "dtype": dtype}


def _ratio_model(n_layers: int, dtype: str = "float16", dense: int = 2) -> dict[str, Any]:
    """ds4-like: ``dense`` ratio-1 layers, then alternating ratio 4 / ratio 128, one 512-wide head."""
    ratios = [1] * dense + [4 if i % 2 == 0 else 128 for i in range(n_layers - dense)]
    return {"layers": [{"kv_heads": 1, "head_dim": 512, "dtype": dtype, "ratio": r} for r in ratios]}


def _default_dicts() -> list[dict[str, Any]]:
    """The default sweep as contract scenario dicts (ids are stable: change none, only add)."""
    out: list[dict[str, Any]] = []

    def add(sid: str, model: dict, policy: dict, workload: dict, consumer: str = "last_row") -> None:
        out.append({"id": sid, "model": model, "policy": policy, "workload": workload, "consumer": consumer})

    # step: step size, layer count, head shape, dtype, batch, chunk alignment, consumer
    for step in (64, 128, 256, 512, 1024):
        add(f"step{step}-m12-p2000c512-d600", M12, {"name": "step", "step": step}, _w(2000, 512, 600))
    add("step256-l4-kv8h128-p4096c512-d600", _u(4, 8, 128), {"name": "step", "step": 256}, _w(4096, 512, 600))
    add("step256-l32-kv8h128-p4096c512-d600", _u(32, 8, 128), {"name": "step", "step": 256}, _w(4096, 512, 600))
    for kvh, hd in ((1, 64), (2, 128), (8, 64), (1, 512), (2, 512)):
        add(f"step256-l12-kv{kvh}h{hd}-p1500c256-d300", _u(12, kvh, hd), {"name": "step"}, _w(1500, 256, 300))
    for dtype in ("bfloat16", "float32"):
        add(f"step256-m12-{dtype}-p1200c512-d300", {**M12, "dtype": dtype}, {"name": "step"}, _w(1200, 512, 300))
    add("step512-l12-kv2h128-bf16-p3000c1024-d200", _u(12, 2, 128, "bfloat16"), {"name": "step", "step": 512}, _w(3000, 1024, 200))
    for batch in (2, 4):
        add(f"step256-l12-kv8h64-b{batch}-p1024c256-d200", _u(12, 8, 64), {"name": "step"}, _w(1024, 256, 200, batch))
    for chunk in (300, 1000, 2048, 100):
        add(f"step256-m12-p2400c{chunk}-d100", M12, {"name": "step"}, _w(2400, chunk, 100))
    add("step1024-l12-kv2h128-p2200c300-d300", _u(12, 2, 128), {"name": "step", "step": 1024}, _w(2200, 300, 300))
    add("step256-l4-kv2h64-f32-p600c256-d100-sdpa", _u(4, 2, 64, "float32"), {"name": "step"}, _w(600, 256, 100), "sdpa")
    add("step256-l4-kv2h128-p520c200-d60-sdpa", _u(4, 2, 128), {"name": "step"}, _w(520, 200, 60), "sdpa")
    add("step512-l2-kv2h64-f32-b2-p700c300-d80-sdpa", _u(2, 2, 64, "float32"), {"name": "step", "step": 512}, _w(700, 300, 80, 2), "sdpa")
    add("step256-ds4r24-p4096c512-d600", _ratio_model(24), {"name": "step"}, _w(4096, 512, 600))
    add("step256-ds4r24-f32-p2100c300-d300", _ratio_model(24, "float32"), {"name": "step"}, _w(2100, 300, 300))
    # quantized (mlx-lm QuantizedKVCache)
    for bits, group, step in ((8, 64, 256), (4, 64, 256), (8, 32, 512), (4, 128, 1024)):
        add(f"quant{bits}g{group}s{step}-m12-p2000c512-d400", M12, {"name": "quantized", "step": step, "bits": bits, "group_size": group}, _w(2000, 512, 400))
    add("quant8g64s256-l32-kv8h128-p3000c1000-d300", _u(32, 8, 128), {"name": "quantized"}, _w(3000, 1000, 300))
    add("quant4g64s256-l12-kv8h64-b2-p1024c256-d200", _u(12, 8, 64), {"name": "quantized", "bits": 4}, _w(1024, 256, 200, 2))
    add("quant8g64s256-ds4r24-p4096c512-d300", _ratio_model(24), {"name": "quantized"}, _w(4096, 512, 300))
    # prealloc (mlx-lm PR #1038 semantics)
    for max_size, prompt in ((4096, 3000), (1024, 2000), (8192, 4000)):
        add(f"prealloc{max_size}-m12-p{prompt}c512-d400", M12, {"name": "prealloc", "max_size": max_size}, _w(prompt, 512, 400))
    add("prealloc2048-l4-kv8h128-b2-p1500c300-d300", _u(4, 8, 128), {"name": "prealloc", "max_size": 2048}, _w(1500, 300, 300, 2))
    add("prealloc4096-ds4r24-p3000c512-d300", _ratio_model(24), {"name": "prealloc", "max_size": 4096}, _w(3000, 512, 300))
    add("prealloc1024-l4-kv2h64-f32-p600c256-d100-sdpa", _u(4, 2, 64, "float32"), {"name": "prealloc", "max_size": 1024}, _w(600, 256, 100), "sdpa")
    # geometric
    add("geom256x2-m12-p3000c512-d400", M12, {"name": "geometric", "seed_rows": 256, "factor": 2}, _w(3000, 512, 400))
    add("geom1024x1.5cap4096-m12-p3500c1000-d400", M12, {"name": "geometric", "seed_rows": 1024, "factor": 1.5, "cap": 4096}, _w(3500, 1000, 400))
    add("geom512x2capctx-l32-kv8h128-p2500c512-d300", _u(32, 8, 128), {"name": "geometric", "seed_rows": 512, "cap": "context"}, _w(2500, 512, 300))
    add("geom64x2-ds4r24-p4096c512-d600", _ratio_model(24), {"name": "geometric", "seed_rows": 64}, _w(4096, 512, 600))
    add("geom256x2-l12-kv8h64-b4-p800c300-d200", _u(12, 8, 64), {"name": "geometric", "seed_rows": 256}, _w(800, 300, 200, 4))
    add("geom128x2-l4-kv2h64-f32-p600c256-d100-sdpa", _u(4, 2, 64, "float32"), {"name": "geometric", "seed_rows": 128}, _w(600, 256, 100), "sdpa")
    # lowpeak (the project's own policy)
    add("lowpeak-m12-p3000c512-d600", M12, {"name": "lowpeak"}, _w(3000, 512, 600))
    add("lowpeak-l32-kv8h128-p4096c512-d300", _u(32, 8, 128), {"name": "lowpeak"}, _w(4096, 512, 300))
    add("lowpeak512-m12-bf16-p2000c300-d300", {**M12, "dtype": "bfloat16"}, {"name": "lowpeak", "step": 512}, _w(2000, 300, 300))
    add("lowpeak-ds4r24-p4096c512-d600", _ratio_model(24), {"name": "lowpeak"}, _w(4096, 512, 600))
    add("lowpeak-l12-kv8h64-b2-p1024c256-d200", _u(12, 8, 64), {"name": "lowpeak"}, _w(1024, 256, 200, 2))
    add("lowpeak-l4-kv2h64-f32-p600c256-d100-sdpa", _u(4, 2, 64, "float32"), {"name": "lowpeak"}, _w(600, 256, 100), "sdpa")
    # later additions (appended so earlier ids keep their splits)
    add("step256-l32-kv2h128-f32-p3000c1000-d300", _u(32, 2, 128, "float32"), {"name": "step"}, _w(3000, 1000, 300))
    add("step256-l12-kv8h128-p256c256-d600", _u(12, 8, 128), {"name": "step"}, _w(256, 256, 600))
    add("step256-m12-p600c256-d60-sdpa", M12, {"name": "step"}, _w(600, 256, 60), "sdpa")
    add("geom512x4-l12-kv2h128-p2000c512-d300", _u(12, 2, 128), {"name": "geometric", "seed_rows": 512, "factor": 4}, _w(2000, 512, 300))
    add("lowpeak1024-l12-kv2h512-p2000c512-d300", _u(12, 2, 512), {"name": "lowpeak", "step": 1024}, _w(2000, 512, 300))
    add("prealloc512-l32-kv2h128-p1000c256-d300", _u(32, 2, 128), {"name": "prealloc", "max_size": 512}, _w(1000, 256, 300))
    add("quant8g64s256-l4-kv2h128-p1000c300-d300", _u(4, 2, 128), {"name": "quantized"}, _w(1000, 300, 300))
    # full (whole context up front) and rotating (sliding window), kvsim's caches
    add("full-m12-p2000c512-d300", M12, {"name": "full"}, _w(2000, 512, 300))
    add("full-ds4r24-p3000c300-d300", _ratio_model(24), {"name": "full", "slack_rows": 2}, _w(3000, 300, 300))
    add("rotating1024-m12-p2000c512-d300", M12, {"name": "rotating", "max_size": 1024, "keep": 4}, _w(2000, 512, 300))
    add("rotating512-l12-kv2h128-p1500c256-d400", _u(12, 2, 128), {"name": "rotating", "max_size": 512}, _w(1500, 256, 400))
    return out


def _tiny_dicts() -> list[dict[str, Any]]:
    """Two small scenarios (tests, smoke runs)."""
    return [
        {"id": "tiny-step64", "model": _u(2, 2, 64, "float32"), "policy": {"name": "step", "step": 64}, "workload": _w(100, 48, 20)},
        {"id": "tiny-step32-sdpa", "model": _u(2, 1, 64, "float32"), "policy": {"name": "step", "step": 32}, "workload": _w(70, 32, 10), "consumer": "sdpa"},
    ]


HOLDOUT_SEED = 20261129
HOLDOUT_SIZE = 36
HOLDOUT_MAX_CACHE_BYTES = 640 << 20
_PRESETS = ("deepseek-v4-flash", "llama-3.1-8b", "qwen3.5-122b-a10b", "gpt-oss-20b", "gemma-3-27b")


def _holdout_policy(rng: random.Random) -> dict[str, Any]:
    name = rng.choice(("step", "step", "prealloc", "geometric", "quantized", "lowpeak", "full", "rotating"))
    if name == "step":
        return {"name": "step", "step": rng.choice((64, 128, 256, 256, 384, 512, 1024))}
    if name == "prealloc":
        return {"name": "prealloc", "max_size": rng.choice((512, 1024, 1536, 2048, 3072, 4096, 6144))}
    if name == "geometric":
        policy: dict[str, Any] = {"name": "geometric", "seed_rows": rng.choice((64, 128, 256, 512, 1024, 2048)),
                                  "factor": rng.choice((1.25, 1.5, 2, 2, 3, 4))}
        cap = rng.choice((None, None, "context", 2048, 8192))
        return policy if cap is None else {**policy, "cap": cap}
    if name == "quantized":
        return {"name": "quantized", "step": rng.choice((128, 256, 512)), "bits": rng.choice((4, 8)),
                "group_size": rng.choice((32, 64, 128))}
    if name == "lowpeak":
        return {"name": "lowpeak"} if rng.random() < 0.5 else {"name": "lowpeak", "step": rng.choice((128, 512, 1024))}
    if name == "rotating":
        return {"name": "rotating", "max_size": rng.choice((256, 512, 1024, 2048))}
    return {"name": "full"}


def _holdout_model(rng: random.Random) -> tuple[dict[str, Any], int]:
    """A model dict and its cache bytes per token (K + V, every layer, batch 1)."""
    kind = rng.random()
    if kind < 0.15:
        preset = rng.choice(_PRESETS)
        # rough sizes, only to cap a draw; they fix which scenarios the measured sweeps hold, so they stay
        per_token = {"deepseek-v4-flash": 41 * 2 * 1024 // 8, "llama-3.1-8b": 32 * 2 * 2048,
                     "qwen3.5-122b-a10b": 12 * 2 * 1024, "gpt-oss-20b": 24 * 2 * 1024,
                     "gemma-3-27b": 62 * 2 * 4096}[preset]
        return {"preset": preset}, per_token
    dtype = rng.choice(("float16", "float16", "bfloat16", "float32"))
    if kind < 0.35:
        n = rng.choice((8, 16, 24, 32))
        ratios = [1] * rng.choice((0, 1, 2)) + [rng.choice((4, 128)) for _ in range(n)]
        head_dim = rng.choice((128, 256, 512))
        layers = [{"kv_heads": 1, "head_dim": head_dim, "dtype": dtype, "ratio": r} for r in ratios]
        return {"layers": layers}, sum(2 * head_dim * DTYPE_BYTES[dtype] // r for r in ratios) or 1
    n, kvh, hd = rng.choice((2, 4, 8, 12, 16, 24, 32)), rng.choice((1, 2, 4, 8)), rng.choice((64, 128, 256))
    return _u(n, kvh, hd, dtype), n * 2 * kvh * hd * DTYPE_BYTES[dtype]


def _holdout_dicts(seed: int = HOLDOUT_SEED, prefix: str = "holdout") -> list[dict[str, Any]]:
    """Scenarios drawn at random (fixed seed) over models, policies and workloads, for checking a
    fitted profile on runs it has never seen: every one is in the validation split."""
    rng = random.Random(seed)
    out: list[dict[str, Any]] = []
    while len(out) < HOLDOUT_SIZE:
        model, per_token_bytes = _holdout_model(rng)
        policy = _holdout_policy(rng)
        batch = rng.choice((1, 1, 1, 1, 2, 4))
        prompt, decode = rng.randrange(200, 4097), rng.randrange(50, 601)
        chunk = rng.choice((128, 200, 256, 300, 512, 777, 1000, 2048))
        if (prompt + decode) * per_token_bytes * batch > HOLDOUT_MAX_CACHE_BYTES:
            continue
        consumer = "sdpa" if rng.random() < 0.25 else "last_row"
        scenario = {"id": f"{prefix}{len(out):02d}-{policy['name']}", "model": model, "policy": policy,
                    "workload": _w(prompt, chunk, decode, batch), "consumer": consumer}
        try:
            parse_scenario(scenario)
        except ScenarioError:  # e.g. a group size that does not divide the head: draw again
            continue
        out.append(scenario)
    return out


SWEEPS: dict[str, Callable[[], list[dict[str, Any]]]] = {
    "default": _default_dicts, "tiny": _tiny_dicts, "holdout": _holdout_dicts,
    "holdout2": lambda: _holdout_dicts(HOLDOUT_SEED + 1, "holdout2-"),
    "holdout3": lambda: _holdout_dicts(HOLDOUT_SEED + 2, "holdout3-"),  # measured after the range design was frozen
    "holdout4": lambda: _holdout_dicts(HOLDOUT_SEED + 3, "holdout4-"),  # measured after host_eval_call_s
    # drawn like the held-out sweeps, but for fitting: the random scenarios the held-out checks draw
    "train2": lambda: _holdout_dicts(HOLDOUT_SEED + 100, "train2-"),
    "holdout5": lambda: _holdout_dicts(HOLDOUT_SEED + 4, "holdout5-"),  # measured with the host probe
    "holdout6": lambda: _holdout_dicts(HOLDOUT_SEED + 5, "holdout6-"),  # measured after the bandwidth fit
    "holdout7": lambda: _holdout_dicts(HOLDOUT_SEED + 6, "holdout7-"),  # measured with the refit profile frozen
    "holdout8": lambda: _holdout_dicts(HOLDOUT_SEED + 7, "holdout8-"),  # after the donation and AsType fixes
    "holdout9": lambda: _holdout_dicts(HOLDOUT_SEED + 8, "holdout9-"),
    "holdout10": lambda: _holdout_dicts(HOLDOUT_SEED + 9, "holdout10-"),  # after the CUDA graph probe
    "holdout11": lambda: _holdout_dicts(HOLDOUT_SEED + 10, "holdout11-"),  # before the workspace probe
    "holdout12": lambda: _holdout_dicts(HOLDOUT_SEED + 11, "holdout12-"),  # measured before the next model change
    "holdout13": lambda: _holdout_dicts(HOLDOUT_SEED + 12, "holdout13-"),  # measured before a refit with train3
    "train3": lambda: _holdout_dicts(HOLDOUT_SEED + 101, "train3-"),  # more random train scenarios (stall tails)
    "train4": lambda: _holdout_dicts(HOLDOUT_SEED + 102, "train4-"),  # the same, measured with train3
    "holdout14": lambda: _holdout_dicts(HOLDOUT_SEED + 13, "holdout14-"),  # measured before the floor clamp
    "holdout15": lambda: _holdout_dicts(HOLDOUT_SEED + 14, "holdout15-"),  # the same
    "holdout16": lambda: _holdout_dicts(HOLDOUT_SEED + 15, "holdout16-"),  # measured after the floor was committed
    "holdout17": lambda: _holdout_dicts(HOLDOUT_SEED + 16, "holdout17-"),  # the same
}
ALL_VALIDATION = frozenset({f"holdout{n}" for n in ("", *range(2, 18))})
ALL_TRAIN = frozenset({"train2", "train3", "train4"})  # every scenario in the train split


def assign_splits(scenarios: Iterable[Scenario], all_in: str | None = None) -> list[SweepItem]:
    """Deterministic ~60/40 train/validation split; every policy with >= 2 scenarios is in both.
    ``all_in`` puts every scenario in that split (``validation``: a held-out sweep)."""
    if all_in is not None:
        return [SweepItem(sc, all_in) for sc in scenarios]
    seen: dict[str, int] = {}
    items = []
    for sc in scenarios:
        ordinal = seen.get(sc.policy_name, 0)
        seen[sc.policy_name] = ordinal + 1
        items.append(SweepItem(sc, "validation" if ordinal % 5 in VALIDATION_SLOTS else "train"))
    return items


def build_sweep(name: str = "default", backend: str = "mlx-cpu") -> list[SweepItem]:
    """The named sweep's scenarios, validated, with their splits.

    Drawn as the reference workload measures MLX caches (``before_layer_model``: K and V, windows running the
    policy, no companion rows), so every shipped sweep draws the scenarios its files hold.
    """
    if name not in SWEEPS:
        raise ValueError(f"--sweep: unknown sweep, got {name!r} (known: {', '.join(SWEEPS)})")
    all_in = "validation" if name in ALL_VALIDATION else "train" if name in ALL_TRAIN else None
    drawn = (parse_scenario(before_layer_model(d), backend=backend) for d in SWEEPS[name]())
    return assign_splits(drawn, all_in)


