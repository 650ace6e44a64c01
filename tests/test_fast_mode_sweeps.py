"""Fast mode against the op-by-op reference on step and geometric sweeps of llama-3.1-8b and DS4 (a smaller
copy of ``docs/tools/bench_speed.py``'s agreement part, which goes to 1M tokens): every predicted byte equal.

The sweep runs with the step cache warm (neighbouring scenarios share steps), as a dashboard or a
``kvsim predict`` of many scenarios does.
"""

from __future__ import annotations

import pytest

from kvsim.api import simulate
from kvsim.scenario.parse import parse_scenario
from kvsim.sim import memo

BYTES = ("peak_bytes", "final_active_bytes", "peak_low_bytes", "peak_high_bytes", "final_kv_bytes", "grow_events",
         "bytes_copied", "over_allocation_bytes", "peak_step")
POLICIES = [{"name": "step", "step": s} for s in (256, 4096)] + [
    {"name": "geometric", "seed_rows": s, "cap": "context"} for s in (1024, 4096)]
SWEEP = [(model, tokens, policy) for model, sizes in (("llama-3.1-8b", (8192, 20_000)),
                                                      ("deepseek-v4-flash", (8192, 131_072, 140_000)))
         for tokens in sizes for policy in POLICIES]


@pytest.fixture(scope="module", autouse=True)
def _warm_from_empty() -> None:
    memo.clear()


@pytest.mark.parametrize(("model", "tokens", "policy"), SWEEP,
                         ids=[f"{m}-{t}-{p['name']}{p.get('step', p.get('seed_rows'))}" for m, t, p in SWEEP])
def test_fast_mode_predicts_the_reference_bytes(model: str, tokens: int, policy: dict) -> None:
    sc = parse_scenario({"id": "s", "model": {"preset": model}, "policy": policy,
                         "workload": {"prompt_tokens": 2048, "prefill_chunk": 2048, "decode_tokens": tokens}})
    fast = simulate(sc, record_events=False)
    exact = simulate(sc, record_events=False, exact=True)
    assert {k: getattr(fast.summary, k) for k in BYTES} == {k: getattr(exact.summary, k) for k in BYTES}
    assert list(fast.timeline) == list(exact.timeline)
