"""Real mlx-lm generations with random weights: what ``kvsim generate`` predicts, measured.

The procedure of the contract's section 5: the model built by mlx-lm from the config, weights
evaluated (random, drawn by mlx-lm's own initialisers, cast and quantized as ``convert`` does);
``mx.synchronize()``, ``mx.clear_cache()``, ``mx.reset_peak_memory()``; then ``generate_step`` (mlx-lm
0.32.2's loop, as ``stream_generate`` drives it) over a prompt of N random token ids for K tokens; then
``mx.get_peak_memory()``, read and reset at each phase's end (``PhasePeak``). ``scale_config`` shrinks a real
config (few layers, small widths) so that generations of every architecture run on a CPU in seconds.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from kvsim.generation.config import ModelConfig

MOE_KEYS = ("num_local_experts", "num_experts", "n_routed_experts")

SCALE_KEYS: dict[str, int] = {  # width fields and the small value a scaled config gives them
    "hidden_size": 256, "n_embd": 256, "d_model": 256, "block_dim": 256, "conv_dim": 256, "conv_dim_out": 256,
    "intermediate_size": 512, "block_ff_dim": 512, "moe_intermediate_size": 128,
    "shared_expert_intermediate_size": 128, "num_attention_heads": 4, "n_head": 4, "num_heads": 4,
    "num_key_value_heads": 2, "head_dim": 64, "vocab_size": 4096, "num_local_experts": 8, "num_experts": 8,
    "n_routed_experts": 8, "kv_lora_rank": 64, "qk_nope_head_dim": 32, "qk_rope_head_dim": 32, "v_head_dim": 32,
    "linear_num_value_heads": 4, "linear_num_key_heads": 2, "linear_key_head_dim": 64, "linear_value_head_dim": 64,
    "time_step_rank": 16, "query_pre_attn_scalar": 64,
}
LAYER_LISTS = ("layer_types", "no_rope_layers", "block_types")


def scale_config(config: dict[str, Any], layers: int, **widths: int) -> dict[str, Any]:
    """A small copy of ``config``: ``layers`` layers, the widths of ``SCALE_KEYS`` (overridden by
    ``widths``), per-layer lists cut to ``layers``, top-k at most 2. Architecture fields stay."""
    out = {k: v for k, v in config.items() if not k.startswith("_")}
    sizes = {**SCALE_KEYS, **widths}
    layers = max(layers, int(config.get("sliding_window_pattern") or 0))  # gemma3 reads its first global layer
    text = out.get("text_config")
    for doc in (out, text) if isinstance(text, dict) else (out,):
        for key, small in sizes.items():
            if isinstance(doc.get(key), int):
                doc[key] = min(doc[key], small)
        for key in ("num_hidden_layers", "n_layer", "n_layers"):
            if isinstance(doc.get(key), int):
                doc[key] = layers
        for key in LAYER_LISTS:
            if isinstance(doc.get(key), list):
                doc[key] = doc[key][:layers]
        if isinstance(doc.get("full_attn_idxs"), list):
            doc["full_attn_idxs"] = [i for i in doc["full_attn_idxs"] if i < layers] or [layers - 1]
        for key in ("num_experts_per_tok", "experts_per_token"):
            if isinstance(doc.get(key), int):
                doc[key] = min(doc[key], 2)
        if "sliding_window" in doc and isinstance(doc["sliding_window"], int) and "sliding_window" in widths:
            doc["sliding_window"] = widths["sliding_window"]
    if any(isinstance(out.get(k), int) and out[k] > 1 for k in MOE_KEYS):
        out["torch_dtype"] = "float32"  # MLX 0.32.4's CPU GatherMM computes float32 only
    return out


@dataclass(frozen=True, slots=True)
class Run:
    """One measured generation."""

    name: str
    """The shipped config it was scaled from."""
    config: dict[str, Any]
    """The (scaled) config that was run."""
    prompt_tokens: int
    max_tokens: int
    prefill_step_size: int
    kv_bits: int | None
    max_kv_size: int | None
    quantized_kv_start: int
    peak_bytes: int
    """``mx.get_peak_memory()`` after the generation (weights included)."""
    weights_bytes: int
    """``mx.get_active_memory()`` once the weights were evaluated, before the generation."""
    params_bytes: int
    """Sum of the built model's parameters' ``nbytes`` (what ``weights_bytes`` of a prediction is)."""
    kv_bytes: int
    """Sum of the prompt caches' ``nbytes`` at the end."""
    final_active_bytes: int
    cache_bytes: int
    """``mx.get_cache_memory()`` at the end."""
    seconds: float
    mlx_version: str
    mlx_lm_version: str
    device: str
    baseline_rss_bytes: int | None = None
    """Resident runs (``measure_fresh``): the process's RSS (``VmRSS``) once MLX and mlx-lm are imported and
    MLX has run one op, before the model is built."""
    weights_rss_bytes: int | None = None
    """RSS once the weights are evaluated and the buffer cache cleared, before the generation."""
    max_rss_bytes: int | None = None
    """The largest RSS during the generation (``VmHWM``, reset through ``/proc/self/clear_refs`` just before it)."""
    end_rss_bytes: int | None = None
    """RSS after the generation (``mx.synchronize()``)."""
    phase_peaks: list[PhasePeak] | None = None
    """``mx.get_peak_memory()`` at the end of each phase, reset after each read (``PhasePeak``); ``peak_bytes`` is
    their largest. Rows stored before 2026-12-03 have none."""


PhasePeak = tuple[str, int, int]
"""``(phase, tokens, peak bytes)``: the peak since the previous phase's end, read when ``generate_step`` reports the
phase done, without a synchronize (the counter is the allocator's, updated at each ``malloc``:
``backend/cuda/allocator.cpp``, ``metal/allocator.cpp``). Phases: ``"start"`` (the prompt's setup), ``"prefill"``
after each chunk's ``mx.eval`` (``tokens`` the prompt tokens processed, read in ``prompt_progress_callback`` before
``mx.clear_cache()``), ``"first"`` once the first token is evaluated, ``"decode"`` as each token is yielded (its
count; the next step is in flight) and ``"end"`` after the last ``mx.synchronize()``."""


def rss_bytes() -> tuple[int, int]:
    """The process's resident set now and its high-water mark (``VmRSS``, ``VmHWM`` of ``/proc/self/status``)."""
    fields = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":" in line)
    return tuple(int(fields[k].split()[0]) * 1024 for k in ("VmRSS", "VmHWM"))  # type: ignore[return-value]


def reset_rss_peak() -> None:
    """Set ``VmHWM`` to the current RSS (Linux >= 4.0: ``echo 5 > /proc/self/clear_refs``)."""
    Path("/proc/self/clear_refs").write_text("5")


def measure(name: str, config: dict[str, Any], prompt_tokens: int, max_tokens: int, prefill_step_size: int = 2048,
            kv_bits: int | None = None, max_kv_size: int | None = None, seed: int = 0,
            quantized_kv_start: int = 5000, resident: bool = False) -> Run:
    """Run one generation as the contract's section 5 measures it; with ``resident`` (Linux) also the
    process's RSS before the model, with the weights, at most during the generation, and after it."""
    import mlx.core as mx
    import mlx_lm
    from mlx_lm.generate import generate_step
    from mlx_lm.models.cache import make_prompt_cache

    from kvsim.generation.model import build_model

    mx.eval(mx.zeros(1))  # MLX's CPU stream and its thread exist from here on
    baseline_rss = rss_bytes()[0]
    mx.random.seed(seed)
    built = build_model(ModelConfig(config, name), stand_in=False)
    model = built.model
    mx.eval(model.parameters())
    mx.synchronize()
    mx.clear_cache()
    weights = mx.get_active_memory()
    mx.reset_peak_memory()
    prompt = mx.random.randint(0, 256, (prompt_tokens,)).astype(mx.uint32)
    mx.eval(prompt)
    cache = make_prompt_cache(model, max_kv_size=max_kv_size)
    weights_rss = rss_bytes()[0]
    if resident:
        reset_rss_peak()
    phases: list[PhasePeak] = []

    def phase_done(phase: str, tokens: int) -> None:
        phases.append((phase, tokens, mx.get_peak_memory()))
        mx.reset_peak_memory()

    def prompt_done(done: int, total: int) -> None:
        phase_done("start" if not phases else "first" if done == total else "prefill", done)

    start = time.perf_counter()
    for n, _ in enumerate(generate_step(prompt, model, max_tokens=max_tokens, prompt_cache=cache,
                                        prefill_step_size=prefill_step_size, kv_bits=kv_bits,
                                        quantized_kv_start=quantized_kv_start, prompt_progress_callback=prompt_done)):
        phase_done("decode", n + 1)
        if n + 1 >= max_tokens:
            break
    mx.synchronize()
    phase_done("end", 0)
    seconds = time.perf_counter() - start
    end_rss, max_rss = rss_bytes()
    rss = dict(baseline_rss_bytes=baseline_rss, weights_rss_bytes=weights_rss, max_rss_bytes=max_rss,
               end_rss_bytes=end_rss) if resident else {}
    return Run(name, config, prompt_tokens, max_tokens, prefill_step_size, kv_bits, max_kv_size, quantized_kv_start,
               peak_bytes=max(p for _, _, p in phases), weights_bytes=weights, params_bytes=built.weights_bytes,
               kv_bytes=sum(c.nbytes for c in cache), final_active_bytes=mx.get_active_memory(),
               cache_bytes=mx.get_cache_memory(), seconds=seconds, mlx_version=mx.__version__,
               mlx_lm_version=mlx_lm.__version__, device=str(mx.default_device()), phase_peaks=phases, **rss)


def measure_fresh(*args: Any, **kwargs: Any) -> Run:
    """``measure(..., resident=True)`` in a fresh Python interpreter: its RSS is this generation's alone.

    A plain subprocess, not ``multiprocessing``'s spawn: spawn re-imports the parent's ``__main__`` in the
    child (under pytest, after Streamlit's AppTest, the dashboard script and Streamlit: +130 MB of RSS)."""
    import subprocess
    import sys

    child = ("import json, sys, dataclasses; from kvsim.generation.measure import measure; "
             "a = json.load(sys.stdin); "
             "print(json.dumps(dataclasses.asdict(measure(*a['args'], **a['kwargs'], resident=True))))")
    done = subprocess.run([sys.executable, "-c", child], input=json.dumps({"args": args, "kwargs": kwargs}),
                          capture_output=True, text=True, check=False)
    if done.returncode:
        raise RuntimeError(f"measure_fresh: the child failed: {done.stderr.strip().splitlines()[-1:]}")
    return Run(**json.loads(done.stdout.splitlines()[-1]))


def append_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    """Append rows to a jsonl file atomically (the whole file is rewritten through a temp file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    old = path.read_text(encoding="utf-8") if path.exists() else ""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(old + "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))
    os.replace(tmp, path)


def run_row(run: Run, split: str) -> dict[str, Any]:
    return {"split": split, **asdict(run)}


def row_workload(row: dict[str, Any]) -> Any:
    """The ``kvsim.generation.schedule.Workload`` a stored row (``run_row``) ran."""
    from kvsim.generation.schedule import Workload  # here: schedule imports MLX

    return Workload(row["prompt_tokens"], row["max_tokens"], row["prefill_step_size"], row["max_kv_size"],
                    row["kv_bits"], quantized_kv_start=row.get("quantized_kv_start", 5000))
