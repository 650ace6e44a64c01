"""A compiled function's repeated calls are copied, not traced again (``kvsim.generation.repeats``): the graph a
generation records with the copies is, node for node, the one tracing every call records."""

from __future__ import annotations

from dataclasses import astuple

import pytest

from kvsim.generation import repeats
from kvsim.generation.config import ModelConfig, load_model_config
from kvsim.generation.measure import scale_config
from kvsim.generation.model import build_model
from kvsim.generation.schedule import GenerationTrace, RecordedEval, Workload, record
from kvsim.sim.profile import load_profile

CASES = [
    ("qwen3-next-80b-a3b-instruct", 4, 96),  # Gated DeltaNet: a compiled step per token and linear layer
    ("gemma-3-1b-it", 2, 96),  # a shapeless compiled add, twice a layer
    ("llama-3.2-1b-instruct", 2, 96),  # swiglu once a layer
]


def _record(name: str, layers: int, prompt: int, backend: str) -> GenerationTrace:
    config = scale_config(load_model_config(name).config, layers)
    return record(build_model(ModelConfig(config, name)), Workload(prompt, 3, prefill_step_size=64),
                  load_profile(backend))


def _graphs(rec: GenerationTrace) -> list:
    return [e.graph for e in rec.events if isinstance(e, RecordedEval)]


@pytest.mark.parametrize("backend", ["mlx-cpu", "mlx-cuda"])
@pytest.mark.parametrize(("name", "layers", "prompt"), CASES, ids=[c[0] for c in CASES])
def test_copied_calls_record_the_traced_graph(monkeypatch: pytest.MonkeyPatch, name: str, layers: int, prompt: int,
                                              backend: str) -> None:
    copies = []
    real_copy = repeats.copy
    monkeypatch.setattr(repeats, "copy", lambda *a: (copies.append(1), real_copy(*a))[1])
    copied = _graphs(_record(name, layers, prompt, backend))
    assert copies  # some calls were copied
    monkeypatch.setattr(repeats, "call_key", lambda *a: object())  # no call is like another: all traced
    traced = _graphs(_record(name, layers, prompt, backend))
    assert len(copied) == len(traced)
    for c, t in zip(copied, traced):
        assert [astuple(a) for a in c.graph.arrays] == [astuple(a) for a in t.graph.arrays]
        assert (c.graph.outputs, c.leaf_buffers, c.buffer_bytes) == (t.graph.outputs, t.leaf_buffers, t.buffer_bytes)


def test_a_call_unlike_the_last_is_traced() -> None:
    """The key tells apart arguments of other shapes or strides, and arguments that are the same array."""
    import mlx.core as mx

    from kvsim.generation.trace import tracing

    with tracing() as t:
        a, b = mx.zeros((4, 8)), mx.zeros((4, 8))
        nodes = [t.node(a), t.node(b)]
        key = repeats.call_key(t, print, (a, b), {}, nodes)
        assert key == repeats.call_key(t, print, (b, a), {}, nodes[::-1])
        assert key != repeats.call_key(t, print, (a, a), {}, [nodes[0]] * 2)
        assert key != repeats.call_key(t, print, (a, a.T), {}, [nodes[0], t.node(a.T)])
        assert key != repeats.call_key(t, print, (a, b), {"mask": None}, nodes)
