"""The quantized class of issue #16 on real MLX (CPU): mlx-lm's QuantizedKVCache, 8 bits, group 64, step 256,
12 layers of 8 x 128 float16, the prompt in 512-token chunks.

On a quiet host the predicted peak is within 3% of every run (measured: to a few bytes); a run on a busy
host peaks lower, by whole concatenations whose inputs the worker freed while the host thread stalled, and
lands in the CPU load range (``docs/validation.md``). The host is made quiet for the runs by real-time
scheduling where the process may ask for it (root on Linux); elsewhere only the range is checked.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import pytest

from kvsim.api import simulate
from kvsim.calibration.measure import run_reference
from kvsim.scenario.parse import parse_scenario

pytest.importorskip("mlx.core")


def quantized(prompt_tokens: int, decode_tokens: int) -> dict:
    return {"id": f"quant8g64s256-m12-p{prompt_tokens}c512-d{decode_tokens}",
            "model": {"n_layers": 12, "kv_heads": 8, "head_dim": 128, "dtype": "float16"},
            "policy": {"name": "quantized", "step": 256, "bits": 8, "group_size": 64},
            "workload": {"prompt_tokens": prompt_tokens, "prefill_chunk": 512, "decode_tokens": decode_tokens}}


@contextlib.contextmanager
def quiet_host() -> Iterator[bool]:
    """FIFO real-time priority for this thread (the stream's worker thread, created inside, inherits it):
    other processes cannot deschedule the run. Yields whether it was granted."""
    try:
        before = os.sched_getscheduler(0), os.sched_getparam(0)
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(10))
    except (AttributeError, PermissionError, OSError):
        yield False
        return
    try:
        yield True
    finally:
        os.sched_setscheduler(0, before[0], before[1])


@pytest.mark.parametrize("prompt_tokens, decode_tokens", [(1000, 300), (2000, 400)])
def test_quantized_class_on_a_quiet_host(prompt_tokens: int, decode_tokens: int) -> None:
    """Every run lies in the predicted range; on a quiet host (SCHED_FIFO) the runs that no stall lowered match
    the point. A stall only lowers a peak (the worker frees in-flight inputs while the host waits): 12 quiet runs
    in a row matched to 16 B, while 2 of 4 runs of this file had one run of two 4.4% low (114,053,208 B against
    119,296,168), inside the range. So the largest of three runs is held to 3% of the point."""
    scenario = parse_scenario(quantized(prompt_tokens, decode_tokens))
    predicted = simulate(scenario).summary
    with quiet_host() as quiet:
        peaks = [run_reference(scenario).peak_bytes for _ in range(3)]
    assert all(predicted.peak_low_bytes <= p <= predicted.peak_high_bytes for p in peaks), (predicted, peaks)
    if quiet:
        assert abs(predicted.peak_bytes - max(peaks)) <= 0.03 * max(peaks), (predicted.peak_bytes, peaks)
