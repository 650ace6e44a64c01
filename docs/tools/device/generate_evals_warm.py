"""Per-eval peaks of Llama-3.1-8B generations, the same workload twice in one process (cold, then warm).

Run on the device after ``device_stage.sh`` and ``device_unpack.sh`` (repo root), beside ``cold_chunks.py``: it
asks whether a prefill chunk inside mlx-lm's ``generate_step`` peaks as the same chunk evaluated directly.
Each generation follows ``docs/tools/eval_diff.py``'s ``real_evals`` (``mx.synchronize()`` around each eval).
Writes ``$OUT/generate-evals-warm.json``.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from eval_diff import real_evals  # noqa: E402

from kvsim.generation.config import load_model_config  # noqa: E402

NAME = "llama-3.1-8b-instruct"


def main() -> None:
    config = load_model_config(NAME).config
    runs = []
    for prompt_tokens in (1024, 1024, 8192, 8192):
        rows, overall = real_evals(NAME, config, prompt_tokens, 2048, 4)
        runs.append({"prompt_tokens": prompt_tokens, "overall": overall, "rows": rows})
        print("evals", prompt_tokens, overall, [(p, o, round(b / 1e9, 3)) for p, o, b in rows[:5]], flush=True)
    out = Path(os.environ.get("OUT", "."), "generate-evals-warm.json")
    out.write_text(json.dumps({"name": NAME, "runs": runs}), encoding="utf-8")


if __name__ == "__main__":
    main()
