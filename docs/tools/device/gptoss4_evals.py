"""Per-eval peaks of gpt-oss-20b at full width with its first 4 layers, on the device (docs/generation.md).

Run on the H200 after ``device_stage.sh`` and ``device_unpack.sh`` (repo root): a lone 2,048-token chunk (2,049
prompt tokens) and an 8,192-token prompt in 2,048-token chunks, each eval synchronised as
``docs/tools/eval_diff.py``'s ``real_evals`` does. Writes ``$OUT/gptoss4.json``: the config and each run's rows.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from eval_diff import real_evals  # noqa: E402

from kvsim.generation.config import load_model_config  # noqa: E402

LAYERS = 4


def main() -> None:
    config = dict(load_model_config("gpt-oss-20b").config)
    config["num_hidden_layers"] = LAYERS
    if isinstance(config.get("layer_types"), list):
        config["layer_types"] = config["layer_types"][:LAYERS]
    runs = {}
    for prompt_tokens in (2049, 8192):
        rows, overall = real_evals("gpt-oss-20b", config, prompt_tokens, 2048, 2)
        runs[prompt_tokens] = {"overall": overall, "rows": rows}
        print("evals", prompt_tokens, overall, rows[:5], flush=True)
    Path(os.environ["OUT"], "gptoss4.json").write_text(json.dumps({"config": config, "runs": runs}), encoding="utf-8")


if __name__ == "__main__":
    main()
