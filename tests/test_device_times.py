"""The device's and the host's times per prompt chunk, from the CUPTI chunk traces (``docs/tools/device_times.py``;
``docs/generation.md``, "CUDA: the device's and the host's times per command buffer, traced"): what the figures there
read from the traces."""

from __future__ import annotations

from pathlib import Path

import pytest
from cuda_runs import RUNS
from cupti_trace import device_times

FIRST = RUNS / "kernels" / "chunk-trace.tar.xz"  # five prompts (docs: "a generation's later chunks traced")
MORE = RUNS / "kernels" / "device-time-trace.tar.xz"  # four more architectures (docs/tools/device/device_time_trace.sh)


def warm(archive: Path, name: str) -> list:
    """The warm pass's later chunks: every CUDA graph cached, no kernel built."""
    return [c for c in device_times.read_chunks(archive, name) if c.run == 1 and c.offset > 0]


def test_a_warm_chunk_encodes_in_tens_of_milliseconds_whatever_the_model() -> None:
    """The host encodes a warm 2,048-token chunk in 18-31 ms for every one of the eight models, from Qwen3-0.6B to
    Mistral-7B, while their devices take 9-310 ms: the host's time is not the model's size."""
    chunks = [c for a, names in ((FIRST, ("q4", "mis6", "phi4", "llama8")),
                                 (MORE, ("gemma1b", "smol17", "qwen06", "gemma4b"))) for n in names for c in warm(a, n)]
    assert len(chunks) == 21 and all(c.instantiations == 0 for c in chunks)
    assert 0.018 <= min(c.host_s for c in chunks) and max(c.host_s for c in chunks) <= 0.031
    assert 0.009 <= min(c.device_busy_s for c in chunks) and max(c.device_busy_s for c in chunks) <= 0.31


@pytest.mark.parametrize(("archive", "name", "depth"), [
    (FIRST, "q4", 9), (FIRST, "mis6", 9), (FIRST, "phi4", 8), (FIRST, "llama8", 7), (MORE, "gemma4b", 9),
])
def test_where_the_device_is_slower_the_host_puts_most_of_a_chunk_in_flight(archive: Path, name: str, depth: int) -> None:
    """A device several times slower than the host: at least ``depth`` graphs in flight in every warm chunk."""
    assert min(c.depth for c in warm(archive, name)) >= depth


@pytest.mark.parametrize("name", ["gemma1b", "smol17", "qwen06"])
def test_where_the_device_keeps_pace_a_few_graphs_run_at_once(name: str) -> None:
    """Small models whose device time is within 2x of the host's: at most 4 graphs in flight."""
    chunks = warm(MORE, name)
    assert chunks and max(c.depth for c in chunks) <= 4
    assert all(c.device_busy_s < 1.2 * c.host_s for c in chunks)


def test_a_truncated_trace_reads_without_its_last_line() -> None:
    """The MoE's trace was cut off by its timeout mid-line (``moe4``): it reads, with no chunk timed."""
    assert device_times.read_chunks(MORE, "moe4") == []
    assert device_times.names_in(MORE) == ["gemma1b", "gemma4b", "moe4", "qwen06", "smol17"]


def test_the_tool_names_a_trace_it_does_not_have(capsys: pytest.CaptureFixture[str]) -> None:
    assert device_times.main([str(MORE), "gema1b"]) == 2
    assert "no trace 'gema1b'" in capsys.readouterr().err
    assert device_times.main([str(MORE.with_name("nope.tar.xz"))]) == 2
