"""Where a model's ``config.json`` comes from: a folder, the file itself, a shipped name, or a Hub repo id.

Only the config is read (never weights): a model folder needs nothing else. A repo id is fetched through
``huggingface_hub.hf_hub_download(repo, "config.json")`` when online.
"""

from __future__ import annotations

import json
import re
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvsim.core.errors import KvsimError
from kvsim.core.paths import PACKAGE_DATA_DIR

CONFIGS_DIR = PACKAGE_DATA_DIR / "configs"
"""Shipped ``config.json`` files of real published models, ``<name>.json``, each with a ``_source`` repo id."""

REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


class ModelConfigError(KvsimError):
    """A model config that cannot be read or built; one line naming the field and value."""


@dataclass(frozen=True, slots=True)
class ModelConfig:
    """A model's ``config.json`` as mlx-lm reads it."""

    config: dict[str, Any]
    """The parsed ``config.json`` (mlx-lm's ``load_config``: JSON, nothing else read)."""
    source: str
    """Where it came from: a path, ``shipped:<name>`` or ``hf:<repo id>``."""

    @property
    def model_type(self) -> str:
        return str(self.config.get("model_type", ""))


def shipped_names() -> list[str]:
    """Names of the configs shipped under ``kvsim/data/configs``."""
    return sorted(p.stem for p in CONFIGS_DIR.glob("*.json"))


def load_model_config(model: str) -> ModelConfig:
    """Read the config named by ``model``: a folder holding ``config.json``, the file, a shipped name, or a
    Hugging Face repo id. Raises ``ModelConfigError`` (one line) when it cannot."""
    path = Path(model).expanduser()
    if path.is_dir():
        return _read(path / "config.json", str(path))
    if path.is_file():
        return _read(path, str(path))
    shipped = CONFIGS_DIR / f"{model}.json"
    if shipped.is_file():
        return _read(shipped, f"shipped:{model}")
    if REPO_ID.match(model):
        return _read(_download(model), f"hf:{model}")
    raise ModelConfigError(f"model: no such file, folder, shipped config or repo id: {model!r}")


def _read(path: Path, source: str) -> ModelConfig:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ModelConfigError(f"model: {source} holds no config.json") from None
    except OSError as err:
        raise ModelConfigError(f"model: cannot read {path} ({err.strerror})") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ModelConfigError(f"model: {path} is not valid JSON ({err})") from None
    if not isinstance(doc, dict):
        raise ModelConfigError(f"model: {path} must hold a JSON object, got {type(doc).__name__}")
    if "model_type" not in doc:
        raise ModelConfigError(f"model_type: missing from {path}")
    return ModelConfig(doc, source)


def _download(repo_id: str) -> Path:
    """``config.json`` of a Hub repo: from huggingface_hub's cache, else fetched; one line when offline."""
    try:
        from huggingface_hub import hf_hub_download
        from huggingface_hub.errors import EntryNotFoundError, LocalEntryNotFoundError, RepositoryNotFoundError
    except ImportError:
        raise ModelConfigError(f"model: {repo_id!r} is a repo id and huggingface_hub is not installed") from None
    try:
        return Path(hf_hub_download(repo_id, "config.json", local_files_only=True))
    except (LocalEntryNotFoundError, OSError, ValueError):
        pass
    try:
        socket.getaddrinfo("huggingface.co", 443)
    except OSError:
        raise ModelConfigError(f"model: cannot fetch config.json of {repo_id!r}: no network (huggingface.co "
                               "does not resolve); pass a local folder or file") from None
    try:
        return Path(hf_hub_download(repo_id, "config.json"))
    except RepositoryNotFoundError:
        raise ModelConfigError(f"model: no Hugging Face repo {repo_id!r} (or it is gated)") from None
    except LocalEntryNotFoundError:
        raise ModelConfigError(f"model: cannot fetch config.json of {repo_id!r}: no network") from None
    except EntryNotFoundError:
        raise ModelConfigError(f"model: repo {repo_id!r} has no config.json") from None
    except Exception as err:  # noqa: BLE001 - timeouts, proxies: huggingface_hub raises many kinds
        raise ModelConfigError(f"model: cannot fetch config.json of {repo_id!r} ({type(err).__name__})") from None
