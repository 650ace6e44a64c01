"""data/manifest.json describes every measurement file as it is now (issue #16); lookups by role."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from kvsim.calibration import manifest
from kvsim.calibration.datafile import read_calibration
from kvsim.calibration.sweep import ALL_VALIDATION
from kvsim.core.paths import REPO_DATA_DIR

REBUILD = "data/manifest.json is stale: rebuild with python -m kvsim.calibration.manifest and commit it"


@pytest.fixture(scope="module")
def built() -> dict[str, Any]:
    """The manifest built from the files now (reads and hashes all of data/, about 69 MB, once)."""
    return manifest.build(REPO_DATA_DIR)


def _entries(m: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for group in m["folders"].values() for e in group]


def test_committed_manifest_matches_the_files(built: dict[str, Any]) -> None:
    committed = (REPO_DATA_DIR / manifest.MANIFEST_NAME).read_text(encoding="utf-8")
    assert committed == manifest.render(built) + "\n", REBUILD


def test_every_file_is_listed_once(built: dict[str, Any]) -> None:
    on_disk = set()
    for root, dirs, names in os.walk(REPO_DATA_DIR):
        rel_root = Path(root).relative_to(REPO_DATA_DIR)
        if rel_root == Path("."):
            dirs[:] = [d for d in dirs if d not in ("public", "generation")]
        on_disk |= {(rel_root / n).as_posix() for n in names
                    if n != "manifest.json" and not n.startswith(".") and not n.endswith(".md")}  # notes are not data
    listed = [e["path"] for e in _entries(built)]
    assert len(listed) == len(set(listed))
    assert set(listed) == on_disk
    assert {"calibration/mlx-cuda-0.32.4-20261129.jsonl", "probes/mlx-cuda-0.32.4-20261129-matmul-probe.jsonl"} <= on_disk


def test_roles_groups_and_split_counts(built: dict[str, Any]) -> None:
    assert built["roles"] == list(manifest.ROLES)
    for key, group in built["folders"].items():
        for e in group:
            assert e["role"] in manifest.ROLES, e["path"]
            assert key == f"{e['backend']}-{e['mlx_version']}", e["path"]
            assert len(e["sha256"]) == 64 and e["records"] > 0
            if "splits" in e:  # a calibration file: the role is its splits, heldout for a held-out sweep
                assert sum(s["records"] for s in e["splits"].values()) == e["records"]
                expected = "heldout" if e["sweep"] in ALL_VALIDATION else "+".join(sorted(e["splits"]))
                assert e["role"] == expected, e["path"]


@pytest.fixture(scope="module")
def cuda_splits() -> dict[Path, tuple[str, set[str]]]:
    """Each mlx-cuda 0.32.4 calibration file's sweep and the splits of its records, read directly."""
    out = {}
    for path in sorted(REPO_DATA_DIR.glob("*/mlx-cuda-0.32.4-*.jsonl")):
        if path.parent.name != "probes":
            header, records = read_calibration(path)
            out[path] = (header["sweep"], {r["split"] for r in records})
    return out


@pytest.mark.parametrize("role", ["train", "validation", "heldout"])
def test_files_picks_by_the_records_splits(role: str, cuda_splits: dict[Path, tuple[str, set[str]]]) -> None:
    """``files()`` against the records: train/validation by the records' split, heldout by the sweep."""
    expected = [
        path for path, (sweep, splits) in cuda_splits.items()
        if (role == "heldout") == (sweep in ALL_VALIDATION) and (role == "heldout" or role in splits)
    ]
    assert expected and sorted(manifest.files("mlx-cuda", "0.32.4", role)) == expected
    assert manifest.files("mlx-metal", "0.32.4", role) == []


def test_bad_lookups_are_one_line(tmp_path: Path) -> None:
    with pytest.raises(manifest.ManifestError, match=r"^role: must be one of .*got 'test'$"):
        manifest.files("mlx-cuda", "0.32.4", "test")
    with pytest.raises(manifest.ManifestError, match="cannot read") as err:
        manifest.files("mlx-cuda", "0.32.4", "train", data_dir=tmp_path)
    assert "\n" not in str(err.value)


def test_write_is_atomic_and_refuses_unknown_files(tmp_path: Path) -> None:
    for rel in ("holdout5/mlx-cpu-0.32.4-20261129.jsonl", "probes/mlx-cuda-0.32.4-20261129-quantize-probe.jsonl",
                "public/mlx-lm-peak-reports.json"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(REPO_DATA_DIR / rel, tmp_path / rel)
    written = manifest.write(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["holdout5", "manifest.json", "probes", "public"]
    assert manifest.load(tmp_path) == manifest.build(tmp_path)
    assert written.read_text(encoding="utf-8").endswith("}\n")
    assert manifest.files("mlx-cpu", "0.32.4", "heldout", tmp_path) == [tmp_path / "holdout5/mlx-cpu-0.32.4-20261129.jsonl"]
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "scratch.txt").write_text("x\n")
    with pytest.raises(manifest.ManifestError, match=r"^notes/scratch.txt: not a calibration file"):
        manifest.build(tmp_path)
