"""`kvsim calibrate`: run the reference workload over a built-in sweep and record MLX's counters.

Each finished (scenario, repeat) is appended to ``<out>/<backend>-<mlx-version>-<yyyymmdd>.jsonl``
by rewriting the file atomically, so an interrupted run loses nothing and a re-run skips what is done.
"""

from __future__ import annotations

import datetime as dt
import gc
import sys
import time
import warnings
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvsim.datafile import FORMAT, calibration_filename, read_calibration, write_lines_atomic
from kvsim.scenario import Scenario, parse_scenario

DEFAULT_OUT = Path(__file__).resolve().parent.parent / "data" / "calibration"
VALIDATION_SLOTS = (1, 3)  # within each policy, ordinals i with i % 5 in these go to validation (40 %)

M12 = {"n_layers": 12, "kv_heads": 8, "head_dim": 128, "dtype": "float16"}


class SkipWarning(UserWarning):
    """A scenario was skipped because its cache class cannot be built here."""


@dataclass(frozen=True, slots=True)
class CalibrationRun:
    """What one ``calibrate`` call did: the file, runs measured now, runs already there, ids skipped."""

    path: Path
    measured_runs: int
    finished_before: int
    skipped_ids: tuple[str, ...]


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
    return out


def _tiny_dicts() -> list[dict[str, Any]]:
    """Two small scenarios (tests, smoke runs)."""
    return [
        {"id": "tiny-step64", "model": _u(2, 2, 64, "float32"), "policy": {"name": "step", "step": 64}, "workload": _w(100, 48, 20)},
        {"id": "tiny-step32-sdpa", "model": _u(2, 1, 64, "float32"), "policy": {"name": "step", "step": 32}, "workload": _w(70, 32, 10), "consumer": "sdpa"},
    ]


SWEEPS: dict[str, Callable[[], list[dict[str, Any]]]] = {"default": _default_dicts, "tiny": _tiny_dicts}


def assign_splits(scenarios: Iterable[Scenario]) -> list[SweepItem]:
    """Deterministic ~60/40 train/validation split; every policy with >= 2 scenarios is in both."""
    seen: dict[str, int] = {}
    items = []
    for sc in scenarios:
        ordinal = seen.get(sc.policy_name, 0)
        seen[sc.policy_name] = ordinal + 1
        items.append(SweepItem(sc, "validation" if ordinal % 5 in VALIDATION_SLOTS else "train"))
    return items


def build_sweep(name: str = "default", backend: str = "mlx-cpu") -> list[SweepItem]:
    """The named sweep's scenarios, validated, with their splits."""
    if name not in SWEEPS:
        raise ValueError(f"--sweep: unknown sweep, got {name!r} (known: {', '.join(SWEEPS)})")
    return assign_splits(parse_scenario(d, backend=backend) for d in SWEEPS[name]())


def cache_factory_for(scenario: Scenario) -> Callable[[Scenario, int], Any] | None:
    """``kvsim.measure.reference_cache`` if it can build this scenario's cache, else ``None`` (warned)."""
    from kvsim.measure import reference_cache

    try:
        reference_cache(scenario, 0)
    except (ImportError, NotImplementedError, ValueError, KeyError, TypeError) as err:
        problem = f"{type(err).__name__}: {err}".splitlines()[0]
        warnings.warn(f"skipping {scenario.id}: no MLX cache for policy {scenario.policy_name!r} ({problem})", SkipWarning, stacklevel=2)
        return None
    return reference_cache


def measurement_record(item: SweepItem, repeat: int, measurement: Any) -> dict[str, Any]:
    """One JSONL record for a finished run of the reference workload."""
    steps = measurement.steps
    return {
        "kind": "measurement",
        "id": item.scenario.id,
        "split": item.split,
        "repeat": repeat,
        "scenario": item.scenario.to_dict(),
        "backend": measurement.backend,
        "mlx_version": measurement.mlx_version,
        "cache_impl": measurement.cache_impl,
        "peak_bytes": measurement.peak_bytes,
        "final_active_bytes": measurement.final_active_bytes,
        "wall_s": round(sum(s.wall_s for s in steps), 6),
        "steps": {
            "tokens": [s.tokens for s in steps],
            "active_bytes": [s.active_bytes for s in steps],
            "cache_bytes": [s.cache_bytes for s in steps],
            "peak_bytes": [s.peak_bytes for s in steps],
            "wall_s": [round(s.wall_s, 7) for s in steps],
        },
    }


def kvsim_version() -> str:
    """The installed kvsim version, else the one in pyproject.toml."""
    from importlib import metadata

    try:
        return metadata.version("kvsim")
    except metadata.PackageNotFoundError:
        import tomllib

        pyproject = Path(__file__).resolve().parent.parent / "pyproject.toml"
        try:
            return str(tomllib.loads(pyproject.read_text())["project"]["version"])
        except (OSError, KeyError, tomllib.TOMLDecodeError):
            return "unknown"


def _progress(total: int, enabled: bool) -> Any:
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(total=total, file=sys.stderr, unit="run", disable=not enabled, dynamic_ncols=True)


def calibrate(
    out_dir: str | Path = DEFAULT_OUT,
    *,
    sweep: str = "default",
    repeats: int | None = None,
    limit: int | None = None,
    match: str | None = None,
    date: str | None = None,
    progress: bool = True,
) -> CalibrationRun:
    """Measure the sweep on the current MLX device and append records to the day's file.

    Args:
        out_dir: Directory for ``<backend>-<mlx-version>-<yyyymmdd>.jsonl``.
        sweep: A name in ``SWEEPS``.
        repeats: Runs per scenario; default 1 on the CPU backend, 3 on GPU backends.
        limit: Measure only the first ``limit`` scenarios (after ``match``).
        match: Keep only scenarios whose id contains this text.
        date: ``yyyymmdd`` for the file name (default: today, UTC).
        progress: Show a tqdm bar on stderr.

    Returns:
        A ``CalibrationRun`` summary.
    """
    import mlx.core as mx

    from kvsim.measure import device_info, run_reference

    info = device_info()
    backend, version = info["backend"], info["mlx_version"]
    repeats = repeats if repeats is not None else (1 if backend == "mlx-cpu" else 3)
    if repeats < 1:
        raise ValueError(f"--repeats: must be >= 1, got {repeats}")
    items = [it for it in build_sweep(sweep, backend) if match is None or match in str(it.scenario.id)]
    items = items[:limit] if limit is not None else items
    date = date or dt.datetime.now(dt.timezone.utc).strftime("%Y%m%d")
    path = Path(out_dir) / calibration_filename(backend, version, date)
    lines, done = _resume(path, backend, version)
    if not lines:
        header = {"kind": "header", "format": FORMAT, "backend": backend, "mlx_version": version,
                  "mlx_lm_version": info.get("mlx_lm_version"), "kvsim_version": kvsim_version(),
                  "default_device": str(mx.default_device()), "device": info,
                  "host_memory_bytes": _host_memory_bytes(), "sweep": sweep,
                  "created_utc": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")}
        lines.append(_encode(header))
        write_lines_atomic(path, lines)
    todo = [(it, r) for it in items for r in range(repeats) if (str(it.scenario.id), r) not in done]
    bar, ran = _progress(len(todo), progress), 0
    factories: dict[str, Any] = {}
    for item, repeat in todo:
        sid = str(item.scenario.id)
        if sid not in factories:
            factories[sid] = cache_factory_for(item.scenario)
        factory = factories[sid]
        if factory is not None:
            if bar is not None:
                bar.set_postfix_str(str(item.scenario.id)[:40])
            measurement = run_reference(item.scenario, factory)
            lines.append(_encode(measurement_record(item, repeat, measurement)))
            write_lines_atomic(path, lines)
            ran += 1
            del measurement
            gc.collect()
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    skipped = tuple(sid for sid, f in factories.items() if f is None)
    return CalibrationRun(path, ran, len(items) * repeats - len(todo), skipped)


def _host_memory_bytes() -> int | None:
    import os

    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def _encode(obj: Any) -> str:
    import json

    return json.dumps(obj, separators=(",", ":"))


def _resume(path: Path, backend: str, version: str) -> tuple[list[str], set[tuple[str, int]]]:
    """Lines already in ``path`` (a truncated last line dropped) and its finished (id, repeat) pairs."""
    if not path.exists():
        return [], set()
    header, records = read_calibration(path, allow_truncated_tail=True)
    if (header["backend"], header["mlx_version"]) != (backend, version):
        raise ValueError(f"{path}: holds {header['backend']} MLX {header['mlx_version']}, not {backend} MLX {version}")
    lines = [_encode(header)] + [_encode(r) for r in records]
    return lines, {(str(r["id"]), r["repeat"]) for r in records}


def iter_records(items: Iterable[SweepItem]) -> Iterator[dict[str, Any]]:
    """Scenario dicts of sweep items with their split (what ``kvsim fit`` / docs list)."""
    for it in items:
        yield {**it.scenario.to_dict(), "split": it.split}


def main(argv: list[str] | None = None) -> int:
    """Stand-alone entry: ``python -m kvsim.calibrate [options]`` (same options as ``kvsim calibrate``)."""
    from kvsim.cli_calibrate import standalone_main

    return standalone_main(["calibrate", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
