"""Prompt-cache files of policy caches that plain mlx-lm reads too.

mlx-lm 0.32.2's ``save_prompt_cache`` writes each layer's ``type(c).__name__`` and ``c.state``;
``load_prompt_cache`` looks the name up in ``mlx_lm.models.cache`` and calls ``from_state(state)``.
So :func:`save_prompt_cache` writes each policy cache as its mlx-lm equivalent (``KVCache``,
``QuantizedKVCache``, ``RotatingKVCache``: the same state) through mlx-lm's own writer, and records the
policies in the file's metadata under ``kvsim_format`` and ``kvsim_policies``. Plain mlx-lm loads the file
as mlx-lm caches (the metadata keys come back with the user's); :func:`load_prompt_cache` loads it as the
policy caches again.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mlx_lm.models import cache as lm_cache

from policies.mlx_base import PolicyKVCache
from policies.mlx_caches import CLASSES, cache_for

FORMAT_VERSION = "1"  # kvsim_format written and read here
FORMAT_KEY, POLICIES_KEY = "kvsim_format", "kvsim_policies"  # no dots: mlx-lm's tree_unflatten splits on them

# mlx-lm's own functions, captured before ``policies.mlx_install`` can replace them.
_LM_SAVE, _LM_LOAD = lm_cache.save_prompt_cache, lm_cache.load_prompt_cache

_LM_CLASS = {"quantized": lm_cache.QuantizedKVCache, "rotating": lm_cache.RotatingKVCache}


def _as_mlx_lm(cache: Any) -> Any:
    """The mlx-lm cache with the same state (no copy: the same arrays), or ``cache`` if it is not a policy cache."""
    if not isinstance(cache, PolicyKVCache):
        return cache
    return _LM_CLASS.get(cache.policy_name, lm_cache.KVCache).from_state(cache.state)


def save_prompt_cache(
    file_name: str | os.PathLike[str], cache: list[Any], metadata: Mapping[str, str] | None = None
) -> None:
    """``mlx_lm.models.cache.save_prompt_cache`` with the policies kept; written atomically.

    Args:
        file_name: The file; ``.safetensors`` is appended when missing, as MLX does.
        cache: One cache per layer: policy caches and any mlx-lm caches.
        metadata: The caller's string metadata, saved beside the policies.

    Raises:
        ValueError: ``metadata`` uses a key kvsim writes.
    """
    metadata = dict(metadata or {})
    for key in (FORMAT_KEY, POLICIES_KEY):
        if key in metadata:
            raise ValueError(f"metadata.{key}: reserved for kvsim's policies, got {metadata[key]!r}")
    policies = [list(c.meta_state) if isinstance(c, PolicyKVCache) else None for c in cache]
    metadata.update({FORMAT_KEY: FORMAT_VERSION, POLICIES_KEY: json.dumps(policies)})
    path = Path(os.fspath(file_name))
    if path.suffix != ".safetensors":
        path = path.with_name(path.name + ".safetensors")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".safetensors", dir=path.parent)
    os.close(fd)
    try:
        _LM_SAVE(tmp, [_as_mlx_lm(c) for c in cache], metadata)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _file_policies(file_name: str, metadata: dict[str, Any], layers: int) -> list[Any] | None:
    """The per-layer policies a file records (``None``: a plain mlx-lm file)."""
    version = metadata.pop(FORMAT_KEY, None)
    saved = metadata.pop(POLICIES_KEY, None)
    if version is None:
        return None
    if version != FORMAT_VERSION:
        raise ValueError(f"{file_name}: {FORMAT_KEY} {version!r} is not a format this kvsim reads ({FORMAT_VERSION!r})")
    try:
        policies = json.loads(saved)
    except (TypeError, ValueError):
        policies = None
    if not isinstance(policies, list) or len(policies) != layers:
        raise ValueError(f"{file_name}: {POLICIES_KEY} must list one entry per layer ({layers}), got {saved!r}")
    return policies


def load_prompt_cache(
    file_name: str | os.PathLike[str],
    return_metadata: bool = False,
    *,
    policy: Any = None,
    max_context: int | None = None,
) -> Any:
    """``mlx_lm.models.cache.load_prompt_cache`` that gives policy caches back.

    A file saved by :func:`save_prompt_cache` loads as the policies it records. With ``policy`` (a contract
    policy object) a plain mlx-lm file's ``KVCache`` layers load into that policy (the documented conversion;
    other mlx-lm caches stay), and a kvsim file must hold that very policy.

    Raises:
        ValueError: one line, for a file of another format version, or of another policy than ``policy``.
    """
    name = os.fspath(file_name)
    try:
        caches, metadata = _LM_LOAD(name, return_metadata=True)
    except KeyError as err:  # mlx-lm looks each class name up in its own module
        raise ValueError(
            f"{name}: layer class {err.args[0]!r} is not mlx-lm's: the file was written by mlx-lm's save_prompt_cache, "
            "which drops the policy; write it with policies.mlx.save_prompt_cache (or under policies.mlx_install.install)"
        ) from None
    policies = _file_policies(name, metadata, len(caches))
    if policies is None:
        caches = caches if policy is None else convert_prompt_cache(caches, policy, max_context=max_context)
    else:
        caches = [
            c if meta is None else _from_mlx_lm(c, meta, i, name) for i, (c, meta) in enumerate(zip(caches, policies))
        ]
        if policy is not None:
            _check_policy(caches, policy, max_context, name)
    return (caches, metadata) if return_metadata else caches


def _from_mlx_lm(cache: Any, meta: Any, layer: int, file_name: str) -> PolicyKVCache:
    name = meta[0] if isinstance(meta, list) and meta else None
    if name not in CLASSES:
        raise ValueError(f"{file_name}: layer {layer}: policy {name!r} has no MLX cache (known: {', '.join(CLASSES)})")
    try:
        return CLASSES[name].from_state(cache.state, meta)
    except ValueError as err:
        raise ValueError(f"{file_name}: layer {layer}: {err}") from None


def _check_policy(caches: list[Any], policy: Any, max_context: int | None, file_name: str) -> None:
    wanted = cache_for(policy, context_tokens=max_context).policy
    for i, c in enumerate(caches):
        if isinstance(c, PolicyKVCache) and c.policy != wanted:
            raise ValueError(
                f"{file_name}: layer {i} holds {c.policy}, not the policy asked for ({wanted}); load it without policy="
            )


def convert_prompt_cache(caches: list[Any], policy: Any, *, max_context: int | None = None) -> list[Any]:
    """mlx-lm caches as caches of ``policy``, same buffers and offset; other layers stay as they are.

    The layers converted are those of the policy's mlx-lm equivalent: ``KVCache`` for the plain policies,
    ``QuantizedKVCache`` (same ``bits``, ``group_size``) for quantized, ``RotatingKVCache`` (same
    ``max_size``, ``keep``) for rotating; a model's own special layers (sliding windows, ...) stay.

    Raises:
        ValueError: one line, when a layer does not fit the policy (a plain ``KVCache`` for a quantized or
            rotating policy, other bits or window sizes).
    """
    made = cache_for(policy, context_tokens=max_context)
    source = _LM_CLASS.get(made.policy_name, lm_cache.KVCache)
    out = []
    for i, c in enumerate(caches):
        if type(c) is lm_cache.KVCache and source is not lm_cache.KVCache:
            raise ValueError(f"caches[{i}]: a plain KVCache cannot become a {made.policy_name!r} cache")
        if type(c) is source:
            try:
                c = type(made).from_state(c.state, made.meta_state)
            except ValueError as err:
                raise ValueError(f"caches[{i}]: {err}") from None
        out.append(c)
    return out
