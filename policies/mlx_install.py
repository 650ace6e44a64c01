"""``install(policy)``: mlx-lm builds, saves and loads the policy's caches, without editing mlx-lm.

mlx-lm 0.32.2 makes every cache through ``make_prompt_cache``, imported by name into ``generate``
(``generate_step``, ``BatchGenerator.insert``), ``server`` (``ModelProvider._load``, ``_serve_single``),
``chat``, ``cache_prompt`` and ``evaluate``; prompt-cache files go through ``save_prompt_cache`` /
``load_prompt_cache``. ``install`` rebinds those names in each of those modules and restores them on exit::

    with install({"name": "lowpeak"}):
        mlx_lm.generate.generate(model, tokenizer, prompt)   # or the server, BatchGenerator, ...
"""

from __future__ import annotations

import functools
import importlib
import json
import threading
from types import ModuleType, TracebackType
from typing import Any

from policies import mlx_files
from policies.mlx import cache_for, make_prompt_cache
from policies.mlx_rotating import RotatingPolicyKVCache
from policies.parse import POLICY_NAMES, PolicyError

# mlx-lm modules that bind these names at import (``from .models.cache import ...``), and the names.
_MODULES = (
    "mlx_lm.models.cache",
    "mlx_lm.generate",
    "mlx_lm.server",
    "mlx_lm.chat",
    "mlx_lm.cache_prompt",
    "mlx_lm.evaluate",
)
_NAMES = ("make_prompt_cache", "save_prompt_cache", "load_prompt_cache")
_LOCK = threading.Lock()
_ACTIVE: list[Installed] = []


def policy_arg(text: str) -> dict[str, Any]:
    """A policy from the command line: a name (``lowpeak``) or a JSON object (``{"name": "step", "step": 512}``)."""
    if text.lstrip().startswith("{"):
        try:
            obj = json.loads(text)
        except ValueError as err:
            raise PolicyError("policy", text, f"is not valid JSON ({err.msg})") from None
        return obj  # type: ignore[no-any-return]
    if text not in POLICY_NAMES:
        raise PolicyError("policy.name", text, f"unknown policy (known: {', '.join(POLICY_NAMES)})")
    return {"name": text}


def _make(model: Any, max_kv_size: int | None = None, *, policy: dict[str, Any], max_context: int | None) -> list[Any]:
    """mlx-lm's ``make_prompt_cache(model, max_kv_size)`` with the policy's caches.

    As mlx-lm: a model's own ``make_cache`` decides special layers (only its plain ``KVCache`` entries become
    the policy's), and ``max_kv_size`` without one means rotating caches (``keep=4``), here the project's.
    """
    if max_kv_size is not None and not hasattr(model, "make_cache"):
        rotating = {"name": "rotating", "max_size": max_kv_size, "keep": 4}
        return [RotatingPolicyKVCache(cache_for(rotating).policy) for _ in model.layers]  # type: ignore[arg-type]
    return make_prompt_cache(model, policy=policy, max_context=max_context)


def _load(file_name: Any, return_metadata: bool = False, *, policy: dict[str, Any], max_context: int | None) -> Any:
    """mlx-lm's ``load_prompt_cache``: kvsim files as saved, plain mlx-lm files converted into the policy."""
    return mlx_files.load_prompt_cache(file_name, return_metadata, policy=policy, max_context=max_context)


class Installed:
    """The active installation; a context manager, or call :meth:`close` to restore mlx-lm."""

    def __init__(self, policy: dict[str, Any], max_context: int | None) -> None:
        cache_for(policy, context_tokens=max_context)  # a bad policy fails here, before mlx-lm is touched
        self.policy = dict(policy)  # the contract policy object every new cache gets
        self.max_context = max_context  # context tokens for ``full`` / ``cap: "context"``
        self._saved: list[tuple[ModuleType, str, Any]] = []
        replacements = {
            "make_prompt_cache": functools.partial(_make, policy=self.policy, max_context=max_context),
            "save_prompt_cache": mlx_files.save_prompt_cache,
            "load_prompt_cache": functools.partial(_load, policy=self.policy, max_context=max_context),
        }
        for module in _importable(_MODULES):
            for name in _NAMES:
                if hasattr(module, name):
                    self._saved.append((module, name, getattr(module, name)))
                    setattr(module, name, replacements[name])

    def close(self) -> None:
        """Put mlx-lm's own functions back (idempotent)."""
        with _LOCK:
            for module, name, original in reversed(self._saved):
                setattr(module, name, original)
            self._saved = []
            if self in _ACTIVE:
                _ACTIVE.remove(self)

    def __enter__(self) -> Installed:
        return self

    def __exit__(self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None) -> None:
        self.close()


def _importable(names: tuple[str, ...]) -> list[ModuleType]:
    """Those modules that import here (``evaluate`` needs lm-eval, for one)."""
    modules = []
    for name in names:
        try:
            modules.append(importlib.import_module(name))
        except ImportError:
            continue
    return modules


def install(policy: Any, *, max_context: int | None = None) -> Installed:
    """Make mlx-lm build ``policy``'s caches until the returned object is closed (or its ``with`` ends).

    Args:
        policy: A contract policy object, e.g. ``{"name": "lowpeak"}``.
        max_context: Context tokens, for ``full`` / ``cap: "context"`` (and ``prealloc``'s default size).

    Raises:
        ValueError: a bad policy (one line naming the field), or a second install while one is active.
    """
    with _LOCK:
        if _ACTIVE:
            raise ValueError(f"policy: {_ACTIVE[0].policy} is already installed; close it first, got {policy!r}")
        done = Installed(policy, max_context)
        _ACTIVE.append(done)
        return done
