"""The grids behind the generation fits of ``docs/generation.md``: stored runs predicted under each setting.

Each run is traced once per value of ``--set`` (a profile field; trace settings such as kernel rates need a
new trace) and replayed for each ``--tasks`` (``model_max_active_tasks``); each ``--weights`` then gives the
point (``peak_point_weight``) from the same plays, as ``kvsim generate`` makes it (``predict.gpu_peak``).
Prints one line per setting, best first by the objective max(median / 2%, max / 5%) of the |point error|,
with the runs inside their range:

    python docs/tools/generation_grid.py data/generation/mlx-cuda-0.32.4/train.jsonl --backend mlx-cuda \\
        --set first_eval_point_share=0.4,0.5,0.6 --tasks 6,8 --weights 0,0.25,0.5
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
from dataclasses import fields, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from kvsim.generation.config import ModelConfig  # noqa: E402
from kvsim.generation.measure import row_workload  # noqa: E402
from kvsim.generation.model import build_model  # noqa: E402
from kvsim.generation.predict import gpu_peak  # noqa: E402
from kvsim.generation.schedule import record, replay  # noqa: E402
from kvsim.sim.profile import BackendProfile, load_profile  # noqa: E402


def parse_set(text: str) -> tuple[str, list[float]]:
    name, _, values = text.partition("=")
    if name not in {f.name for f in fields(BackendProfile)} or not values:
        raise SystemExit(f"generation_grid: --set wants FIELD=V1,V2,... naming a profile field, got {text!r}")
    return name, [float(v) for v in values.split(",")]


def plays(paths: list[str], base: BackendProfile, settings: list[dict], tasks: list[int]) -> list[tuple]:
    """(setting, tasks, measured peak, evals under the fitted, early, late and floor timings) of every run."""
    out = []
    for path in paths:
        for line in Path(path).read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            built = build_model(ModelConfig(row["config"], row["name"]))
            for setting in settings:
                profile = replace(base, **setting)
                recorded = record(built, row_workload(row), profile)
                for n in tasks:
                    p = replace(profile, model_max_active_tasks=n)
                    timings = (p, p.variant("low"), p.variant("high"), p.floor_variant())
                    out.append((tuple(setting.items()), n, row["peak_bytes"],
                                *(replay(recorded, q).evals for q in timings)))
            print(f"  {row['name']} {row['prompt_tokens']}", file=sys.stderr, flush=True)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+")
    ap.add_argument("--backend", default="mlx-cuda")
    ap.add_argument("--set", action="append", default=[], help="FIELD=V1,V2,... (repeatable: every combination)")
    ap.add_argument("--tasks", default="6")
    ap.add_argument("--weights", default="0.25")
    args = ap.parse_args()
    base = load_profile(args.backend)
    grids = [parse_set(s) for s in args.set]
    settings = [dict(zip([g[0] for g in grids], combo)) for combo in itertools.product(*(g[1] for g in grids))]
    tasks = [int(t) for t in args.tasks.split(",")]
    played = plays(args.files, base, settings, tasks)
    lines = []
    for setting, n, weight in itertools.product({p[0] for p in played}, tasks, map(float, args.weights.split(","))):
        errors, inside = [], 0
        profile = replace(base, **dict(setting), model_max_active_tasks=n, peak_point_weight=weight)
        for s, t, real, *evals in played:
            if (s, t) != (setting, n):
                continue
            point, low, high = gpu_peak(profile, *evals)
            errors.append(abs(point / real - 1) * 100)
            inside += bool(low <= real <= high)
        median, worst = statistics.median(errors), max(errors)
        lines.append((max(median / 2, worst / 5), dict(setting), n, weight, median, worst, inside, len(errors)))
    for objective, setting, n, weight, median, worst, inside, total in sorted(lines, key=lambda x: x[0]):
        print(f"{objective:6.3f}  {setting}  tasks {n}  weight {weight}: {median:.2f}% / {worst:.2f}%, "
              f"{inside} of {total} in range")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
