"""The manifest of the checkout's measurement data, ``data/manifest.json`` (issue #16).

Files stay where they were measured to (``data/calibration``, ``data/holdout7``, ...): moving 69 MB would
rewrite history for nothing. The manifest is the one-folder-per-backend-and-MLX-version view instead: under
``folders["<backend>-<mlx_version>"]`` it lists every file with its role, host, date, record count and sha256.

A calibration file's role comes from its records' per-scenario ``split`` (``kvsim.calibration.validate``):
``train``, ``validation``, ``train+validation`` (with the counts of each), or ``heldout`` when every scenario is
in the validation split and the header's sweep is a held-out one (``sweep.ALL_VALIDATION``). Other files take
their role from their folder (``FOLDER_ROLES``). Rebuild with ``python -m kvsim.calibration.manifest``.
"""

from __future__ import annotations

import hashlib
import json
import lzma
import re
from collections import Counter
from pathlib import Path
from typing import Any

from kvsim.calibration.datafile import FORMAT as CALIBRATION_FORMAT
from kvsim.calibration.datafile import FORMAT_BEFORE_LAYER_MODEL, read_calibration, write_lines_atomic
from kvsim.calibration.sweep import ALL_VALIDATION
from kvsim.core.errors import KvsimError
from kvsim.core.paths import REPO_DATA_DIR

FORMAT = "kvsim-data-manifest/1"
MANIFEST_NAME = "manifest.json"
ROLES = ("train", "validation", "train+validation", "heldout", "probe", "bench")
FOLDER_ROLES = {"bench": "bench", "probes": "probe"}  # files that are not calibration sweeps
OWNED_ELSEWHERE = frozenset({"public", "generation"})  # top-level folders with their own description
_NAME = re.compile(r"^(?P<backend>mlx-[a-z]+)-(?:mlx)?(?P<mlx>\d+\.\d+\.\d+)-(?P<date>\d{8})")


class ManifestError(KvsimError):
    """A file the manifest cannot describe, a missing manifest or a bad lookup; one line."""


def measurement_files(data_dir: Path = REPO_DATA_DIR) -> list[Path]:
    """Every file under ``data_dir`` the manifest lists: all but the manifest, hidden files, notes (``*.md``) and
    ``OWNED_ELSEWHERE``."""
    return sorted(
        p for p in data_dir.rglob("*")
        if p.is_file() and p.name != MANIFEST_NAME and not p.name.startswith(".") and p.suffix != ".md"
        and p.relative_to(data_dir).parts[0] not in OWNED_ELSEWHERE
    )


def _host(device_info: Any) -> dict[str, str | None]:
    """``{"device_name", "gpu_uuid"}`` from a recorded ``device_info`` (``kvsim.calibration.measure``) or string."""
    if isinstance(device_info, str):
        return {"device_name": device_info, "gpu_uuid": None}
    device = (device_info or {}).get("device") or {}
    return {"device_name": device.get("device_name"), "gpu_uuid": device.get("uuid")}


def _calibration_entry(path: Path) -> dict[str, Any]:
    """Backend, version, role and split counts of a ``kvsim calibrate`` file."""
    header, records = read_calibration(path)
    split_of = {str(rec["id"]): rec.get("split", "train") for rec in records}
    scenarios, runs = Counter(split_of.values()), Counter(rec.get("split", "train") for rec in records)
    splits = sorted(scenarios)
    if splits == ["validation"] and header.get("sweep") in ALL_VALIDATION:
        role = "heldout"
    elif splits in (["train"], ["validation"], ["train", "validation"]):
        role = "+".join(splits)
    else:
        raise ManifestError(f"{path}: field 'split' must be train/validation in every record, got {splits}")
    return {
        "backend": header["backend"], "mlx_version": header["mlx_version"], "role": role,
        "sweep": header.get("sweep"), "host": _host(header.get("device")),
        "date": header.get("created_utc"), "date_from": "header", "records": len(records),
        "splits": {s: {"scenarios": scenarios[s], "records": runs[s]} for s in splits},
    }


def _other_entry(path: Path, rel: Path) -> dict[str, Any]:
    """A bench or probe file: role from its folder; backend, version, host and date from its content, else its name."""
    role = FOLDER_ROLES.get(rel.parts[0])
    named = _NAME.match(path.name)
    if role is None or named is None:
        raise ManifestError(f"{rel}: not a calibration file, and neither in {sorted(FOLDER_ROLES)} nor named <backend>-<mlx>-<yyyymmdd>")
    if path.suffix == ".json":  # one document: docs/tools/bench_policies.py and its probes
        doc = json.loads(path.read_text(encoding="utf-8"))
        info, count = doc.get("device_info", doc.get("device")), len(doc.get("runs", []))
    else:  # JSONL, one probe record a line
        lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        versions = {r["mlx"] for r in lines if "mlx" in r}
        doc = {"mlx_version": versions.pop()} if len(versions) == 1 else {}
        info, count = next((r["device"] for r in lines if "device" in r), None), len(lines)
    date, d = doc.get("created_utc"), named["date"]
    return {
        "backend": doc.get("backend", (doc.get("device_info") or {}).get("backend", named["backend"])),
        "mlx_version": doc.get("mlx_version", named["mlx"]), "role": role, "host": _host(info),
        "date": date or f"{d[:4]}-{d[4:6]}-{d[6:]}", "date_from": "header" if date else "file name", "records": count,
    }


def describe(path: Path, data_dir: Path = REPO_DATA_DIR) -> dict[str, Any]:
    """One manifest entry: path (relative to ``data_dir``), backend, MLX version, role, host, date, records, sha256."""
    rel = path.relative_to(data_dir)
    if path.name.endswith(".jsonl.xz"):  # measurement data shipped compressed (data/cpu-load)
        with lzma.open(path, "rb") as fh:
            first = json.loads(fh.readline() or b"null")
    else:
        with path.open("rb") as fh:
            first = json.loads(fh.readline() or b"null") if path.suffix == ".jsonl" else None
    is_calibration = isinstance(first, dict) and first.get("format") in (CALIBRATION_FORMAT, FORMAT_BEFORE_LAYER_MODEL)
    entry = _calibration_entry(path) if is_calibration else _other_entry(path, rel)
    sha256 = hashlib.sha256(path.read_bytes()).hexdigest()
    return {"path": rel.as_posix(), **entry, "sha256": sha256}


def build(data_dir: Path = REPO_DATA_DIR) -> dict[str, Any]:
    """The manifest of ``data_dir``: entries grouped by ``<backend>-<mlx_version>``, each group sorted by path."""
    folders: dict[str, list[dict[str, Any]]] = {}
    for path in measurement_files(data_dir):
        entry = describe(path, data_dir)
        folders.setdefault(f"{entry['backend']}-{entry['mlx_version']}", []).append(entry)
    return {"format": FORMAT, "roles": list(ROLES), "folders": dict(sorted(folders.items()))}


def render(manifest: dict[str, Any]) -> str:
    """The manifest's text as ``data/manifest.json`` holds it (stable, so a diff shows what changed)."""
    return json.dumps(manifest, indent=1, ensure_ascii=False)


def write(data_dir: Path = REPO_DATA_DIR) -> Path:
    """Build and write ``data_dir/manifest.json`` atomically (temp file beside it, then ``os.replace``)."""
    path = data_dir / MANIFEST_NAME
    write_lines_atomic(path, [render(build(data_dir))])
    return path


def load(data_dir: Path = REPO_DATA_DIR) -> dict[str, Any]:
    """The committed manifest; a missing or foreign file is a one-line ``ManifestError``."""
    path = data_dir / MANIFEST_NAME
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as err:
        raise ManifestError(f"{path}: cannot read ({err}); rebuild with python -m kvsim.calibration.manifest") from None
    if manifest.get("format") != FORMAT:
        raise ManifestError(f"{path}: field 'format' must be {FORMAT!r}, got {manifest.get('format')!r}")
    return manifest


def files(backend: str, mlx_version: str, role: str, data_dir: Path = REPO_DATA_DIR) -> list[Path]:
    """Paths of the files of one backend and MLX version that hold ``role``, in path order.

    A ``train+validation`` file is returned for ``train`` and for ``validation`` too (its records say which is which),
    so ``files("mlx-cuda", "0.32.4", "train")`` gives ``calibration/``, ``calibration-b/`` and ``train2/`` to ``train4/``.
    """
    if role not in ROLES:
        raise ManifestError(f"role: must be one of {', '.join(ROLES)}, got {role!r}")
    entries = load(data_dir)["folders"].get(f"{backend}-{mlx_version}", [])
    return [data_dir / e["path"] for e in entries if role == e["role"] or role in e["role"].split("+")]


if __name__ == "__main__":
    print(write())
