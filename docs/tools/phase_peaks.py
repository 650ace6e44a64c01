"""Each phase's measured peak beside kvsim's play of the same eval: for stored runs that recorded their phases
(``kvsim.generation.measure.PhasePeak``, rows from 2026-12-03 on), the peak above the weights of every prompt chunk and
of the first token, real against kvsim's fitted play and its earliest- and latest-free plays (GB), under the shipped
profile or a candidate's fields (``--fields``, a JSON object of ``BackendProfile`` fields).
Chunks kvsim does not play (it repeats one) read ``-``.

    python docs/tools/phase_peaks.py data/generation/mlx-cuda-0.32.4/repeat11.jsonl
    python docs/tools/phase_peaks.py data/generation/mlx-cuda-0.32.4/repeat11.jsonl --fields candidate.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

from kvsim.generation.config import ModelConfig
from kvsim.generation.measure import row_workload
from kvsim.generation.model import build_model
from kvsim.generation.schedule import record, replay
from kvsim.sim.profile import load_profile

PLAYS = ("fit", "low", "high")


def phase_rows(row: dict, profile) -> list[tuple[str, int, float, dict[str, float | None]]]:
    """``(phase, tokens, real GB, {play: kvsim GB})`` above the weights, per prompt chunk and the first token."""
    built = build_model(ModelConfig(row["config"], row["name"]))
    rec = record(built, row_workload(row), profile)
    plays = {"fit": profile, "low": profile.variant("low"), "high": profile.variant("high")}
    evals = {name: replay(rec, p).evals for name, p in plays.items()}
    weights = row["params_bytes"]
    out = []
    for phase, tokens, peak in row["phase_peaks"]:
        if phase not in ("prefill", "first"):
            continue
        ours = {}
        for name, played in evals.items():
            match = [e for e in played if e.phase == phase and e.offset + e.tokens == tokens]
            ours[name] = (match[0].peak_bytes - weights) / 1e9 if match else None
        out.append((phase, tokens, (peak - weights) / 1e9, ours))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="+", type=Path)
    ap.add_argument("--fields", type=Path, help="a JSON object of profile fields to play instead of the shipped ones")
    ap.add_argument("--backend", default="mlx-cuda")
    args = ap.parse_args(argv)
    profile = load_profile(args.backend)
    if args.fields:
        try:
            profile = dataclasses.replace(profile, **json.loads(args.fields.read_text()))
        except (OSError, ValueError, TypeError) as e:
            print(f"phase_peaks: --fields {str(args.fields)!r}: {e}", file=sys.stderr)
            return 2
    for path in args.files:
        if not path.is_file():
            print(f"phase_peaks: {str(path)!r} not found", file=sys.stderr)
            return 2
        for line in path.read_text().splitlines():
            row = json.loads(line)
            if not row.get("phase_peaks"):
                continue
            print(f"{Path(row['name']).stem} {row['prompt_tokens']}:{row['prefill_step_size']}")
            for phase, tokens, real, ours in phase_rows(row, profile):
                cells = " ".join(f"{n} {'-' if ours[n] is None else f'{ours[n]:.2f}'}" for n in PLAYS)
                print(f"  {phase:7s} {tokens:6d}: real {real:.2f}  kvsim {cells}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
