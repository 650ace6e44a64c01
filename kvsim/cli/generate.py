"""``kvsim generate``: will this model, at this context, fit? (the contract's section 5)"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from kvsim.cli.calibrate import positive_int
from kvsim.core.errors import KvsimError

EXIT_INVALID = 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report it
BACKENDS = ("mlx-cpu", "mlx-cuda", "mlx-metal")
KV_BITS = (2, 3, 4, 5, 6, 8)


def add_generate_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``generate`` on an ``add_subparsers()`` object."""
    p = subparsers.add_parser("generate", help="predict a whole mlx-lm generation's peak memory; does it fit?")
    p.add_argument("--model", required=True, help="folder with config.json, the file, a shipped name, or a HF repo id")
    p.add_argument("--prompt-tokens", type=positive_int, required=True, help="prompt length N")
    p.add_argument("--max-tokens", type=positive_int, required=True, help="tokens to generate K")
    p.add_argument("--prefill-step-size", type=positive_int, default=2048, help="mlx_lm.generate's (default 2048)")
    p.add_argument("--max-kv-size", type=positive_int, default=None, help="rotating cache size (models without make_cache)")
    p.add_argument("--kv-bits", type=int, choices=KV_BITS, default=None, help="quantize the KV cache")
    p.add_argument("--kv-group-size", type=positive_int, default=64)
    p.add_argument("--quantized-kv-start", type=int, default=5000, help="quantize once the cache holds this many rows")
    p.add_argument("--policy", default=None, help='KV growth policy: a name (lowpeak, step, ...) or a JSON object')
    p.add_argument("--backend", choices=BACKENDS, default=None, help="default: the device's, else mlx-cpu")
    p.add_argument("--device", default=None, help="mac-16gb ... mac-512gb, h100, h200, rtx-4090, ...: fit verdict")
    p.add_argument("--no-search", action="store_true", help="with --device: skip the longest-context search")
    p.add_argument("--search-budget-s", type=nonnegative_float, default=60.0,  # verdict.SEARCH_BUDGET_S
                   help="with --device: wall-clock seconds for the settings and the search (default 60); "
                        "past them the best bounds found are reported")
    p.add_argument("--json", action="store_true", help="one JSON object")
    p.set_defaults(func=cmd_generate)
    return p


def nonnegative_float(text: str) -> float:
    """argparse type: a finite number >= 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not (0 <= value < float("inf")):
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text!r}")
    return value


def parse_policy(text: str | None) -> dict[str, Any] | None:
    if text is None:
        return None
    if text.lstrip().startswith("{"):
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as err:
            raise KvsimError(f"policy: invalid JSON ({err.msg})") from None
        if not isinstance(obj, dict) or "name" not in obj:
            raise KvsimError(f"policy: must be an object with a name, got {text!r}")
        return obj
    return {"name": text}


def cmd_generate(args: argparse.Namespace) -> int:
    """``kvsim generate``; Ctrl-C exits 130 with one line."""
    try:
        return _generate(args)
    except KeyboardInterrupt:
        print("kvsim: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


def _generate(args: argparse.Namespace) -> int:
    try:  # mlx-lm builds the model: the mlx extra, not the simulator's own needs
        from kvsim.generation.config import load_model_config
        from kvsim.generation.devices import device
        from kvsim.generation.model import build_model
        from kvsim.generation.predict import predict
        from kvsim.generation.schedule import Workload
    except ImportError as err:
        print(f"kvsim: generate needs MLX and mlx-lm ({err.name} is not installed): pip install 'kvsim[mlx]'",
              file=sys.stderr)
        return 2

    try:
        dev = device(args.device) if args.device else None
        backend = args.backend or (dev.backend if dev else "mlx-cpu")
        policy = parse_policy(args.policy)
        if policy is not None:
            from policies.mlx import cache_for

            cache_for(policy, context_tokens=args.prompt_tokens + args.max_tokens)  # a bad policy fails here
        w = Workload(args.prompt_tokens, args.max_tokens, args.prefill_step_size, args.max_kv_size, args.kv_bits,
                     args.kv_group_size, args.quantized_kv_start)
        built = build_model(load_model_config(args.model))
        pred = predict(built, w, backend, policy)
    except (KvsimError, ValueError) as err:
        print(f"kvsim: {err}", file=sys.stderr)
        return EXIT_INVALID
    out: dict[str, Any] = pred.to_json()
    if dev is not None:
        out.update(_fit(built, w, dev, backend, policy, pred, args.search_budget_s, not args.no_search))
    if args.json:
        print(json.dumps(out))
    else:
        print(_text(out))
    return 0


def _fit(built: Any, w: Any, dev: Any, backend: str, policy: dict[str, Any] | None, pred: Any,
         budget_s: float, search: bool) -> dict[str, Any]:
    """The verdict; the settings that make it fit (when it does not); the longest prompt per policy (with
    ``search``), all within ``budget_s`` seconds: what they leave undone is reported as such."""
    from kvsim.generation.verdict import (
        CONTEXT_STEP_TOKENS,
        Budget,
        context_per_policy,
        peak_bytes_per_token,
        verdict,
        what_fits,
    )

    v = verdict(pred.peak_bytes, dev, pred)
    out: dict[str, Any] = {"verdict": v.to_json(), "search_budget_s": budget_s}
    budget = Budget(budget_s)
    seeds: dict[str, dict[int, int]] = {}  # predictions already made at a probe's length are probes
    if w.prompt_tokens % CONTEXT_STEP_TOKENS == 0:
        seeds[policy["name"] if policy else "mlx-lm"] = {w.prompt_tokens: pred.peak_bytes}
    if not v.fits:
        tried, untried = what_fits(built, w, dev, backend, policy, budget)
        out["fixes"] = [{"flags": o.label, "peak_bytes": p.peak_bytes, "peak_exact": p.exact,
                         "fits": verdict(p.peak_bytes, dev).fits} for o, p in tried]
        for o, p in tried:
            if o.label == "--policy lowpeak" and w.prompt_tokens % CONTEXT_STEP_TOKENS == 0:
                seeds["lowpeak"] = {w.prompt_tokens: p.peak_bytes}
        if untried:
            out["fixes_untried"] = [o.label for o in untried]
    if search:
        pols = {"mlx-lm": policy, "lowpeak": {"name": "lowpeak"}} if policy is None else {policy["name"]: policy}
        found = context_per_policy(built, w, dev, backend, pols, budget, seeds, peak_bytes_per_token(pred))
        out["longest_prompt_tokens"] = {name: f.fits_tokens for name, f in found.items()}
        out["longest_prompt_search"] = {name: f.to_json() for name, f in found.items()}
    out["search_s"] = round(time.monotonic() - budget.start_s, 1)
    return out


def _found(f: dict[str, Any], budget_s: float) -> str:
    """``123904 tokens``; ``at least 65536 tokens (...)`` when the budget ran out first."""
    n = f["fits_tokens"]
    if f["at_limit"]:
        return f"{n} tokens or more (the search's limit)"
    if f["done"]:
        return f"{n} tokens" if n else "none (not even 128 tokens)"
    over = f"{f['over_tokens']} tokens does not fit" if f["over_tokens"] else ""
    found = f"at least {n} tokens" + (f", {over}" if over else "") if n else (over or "not probed")
    return f"{found} (the {budget_s:g} s search budget ran out: --search-budget-s)"


def _gb(n: int) -> str:
    return f"{n / 1e9:.2f} GB"


def _text(o: dict[str, Any]) -> str:
    lines = [
        f"model      {o['model']}  backend {o['backend']}",
        f"workload   prompt {o['prompt_tokens']} tokens, generate {o['max_tokens']}, prefill step "
        f"{o['prefill_step_size']}" + (f", kv-bits {o['kv_bits']}" if o["kv_bits"] else "")
        + (f", max-kv-size {o['max_kv_size']}" if o["max_kv_size"] else ""),
        f"peak       {_gb(o['peak_bytes'])}  (mx.get_peak_memory(), in the {o['peak_phase']} step at {o['peak_offset']} tokens)",
        *([f"  range    {_gb(o['peak_low_bytes'])} to {_gb(o['peak_high_bytes'])} (where runs peak: the GPU frees "
             "asynchronously)"] if "peak_low_bytes" in o else []),
        f"  weights  {_gb(o['weights_bytes'])}",
        f"  KV       {_gb(o['peak_kv_bytes'])} at the peak, {_gb(o['kv_bytes'])} at the end",
        f"  transient {_gb(o['transient_bytes'])} (the step's activations and KV growth copies)",
        f"cache      {_gb(o['cache_bytes'])} at the end (mx.get_cache_memory()); at most "
        f"{_gb(o['resident_cache_bytes'])} above the peak",
        f"resident   {_gb(o['resident_bytes'])}  (weights + largest active + cache {_gb(o['footprint_bytes'])}"
        + (f", process baseline {_gb(o['baseline_bytes'])})" if o["baseline_bytes"] else
           ", process baseline not measured for this backend)"),
    ]
    lines += [f"note       {n}" for n in o.get("notes", [])]
    if "verdict" in o:
        v = o["verdict"]
        lines.append(f"device     {v['device']}: GPU working set {_gb(v['working_set_bytes'])}, MLX limit "
                     f"{_gb(v['memory_limit_bytes'])} -> {v['status'].upper()}")
        if v["range_over_working_set"]:
            lines.append(f"  but a run may peak up to {_gb(o['peak_high_bytes'])} (the range's top), over the working set")
        lines.append(f"  resident {_gb(v['resident_bytes'])} of {_gb(v['memory_bytes'])} memory -> "
                     + ("fits" if v["resident_fits"] else "DOES NOT FIT")
                     + (f"; wired at most {_gb(v['wired_bytes'])} (min(active + cache, working set))"
                        if "wired_bytes" in v else ""))
        for fix in o.get("fixes", []):
            peak = _gb(fix["peak_bytes"]) if fix["peak_exact"] else f"at least {_gb(fix['peak_bytes'])}"
            lines.append(f"  {'fits ' if fix['fits'] else 'still over'} with {fix['flags']}: peak {peak}")
        if o.get("fixes_untried"):
            lines.append(f"  not decided within the {o['search_budget_s']:g} s budget: " + "; ".join(o["fixes_untried"]))
        for name, f in o.get("longest_prompt_search", {}).items():
            lines.append(f"  longest prompt that fits with {name}: {_found(f, o['search_budget_s'])}")
    return "\n".join(lines)
