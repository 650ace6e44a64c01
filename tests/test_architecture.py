"""The house: layered subpackages with no import circles, ruff-clean, and a wheel that predicts alike.

These run the real tools (import-linter, grimp, ruff, pip) on the checkout.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import grimp
import pytest
import simpy

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def test_import_contracts_are_kept() -> None:
    """pyproject's import-linter contracts: layers, policies without kvsim, Streamlit only in the dashboard."""
    out = subprocess.run([str(BIN / "lint-imports"), "--no-cache"], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert "0 broken" in out.stdout


def _cycles(graph: grimp.ImportGraph, package: str) -> list[tuple[str, ...]]:
    """Module pairs of ``package`` that import each other, directly or through a chain."""
    modules = sorted(m for m in graph.find_descendants(package))
    found = []
    for i, a in enumerate(modules):
        for b in modules[i + 1:]:
            if graph.chain_exists(importer=a, imported=b) and graph.chain_exists(importer=b, imported=a):
                found.append((a, b))
    return found


def test_no_import_circles() -> None:
    graph = grimp.build_graph("kvsim", "policies", cache_dir=None)
    assert _cycles(graph, "kvsim") == [] and _cycles(graph, "policies") == []


def test_ruff_is_clean() -> None:
    out = subprocess.run([str(BIN / "ruff"), "check", "--no-cache", "."], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout[-4000:]


SCENARIOS = [
    {"id": "ds4-full", "model": {"preset": "deepseek-v4-flash"}, "policy": {"name": "full"},
     "workload": {"prompt_tokens": 2048, "prefill_chunk": 2048, "decode_tokens": 16}},
    {"id": "llama-step", "model": {"preset": "llama-3.1-8b"}, "policy": {"name": "step", "step": 256},
     "workload": {"prompt_tokens": 1000, "prefill_chunk": 512, "decode_tokens": 300}},
    {"id": "gemma-lowpeak", "backend": "mlx-cuda", "model": {"preset": "gemma-3-27b"},
     "policy": {"name": "lowpeak"}, "workload": {"prompt_tokens": 700, "prefill_chunk": 512, "decode_tokens": 40}},
]


def _predict(python: Path, scenarios: Path, cwd: Path, backend: str) -> list[dict]:
    out = subprocess.run([str(python), "-m", "kvsim.cli", "predict", str(scenarios), "--backend", backend],
                         cwd=cwd, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    return [json.loads(line) for line in out.stdout.splitlines()]


@pytest.mark.slow
def test_a_wheel_built_from_the_sdist_predicts_what_the_checkout_does(tmp_path: Path) -> None:
    """sdist -> wheel -> a fresh venv with only that wheel (and its runtime needs): byte-identical predictions.

    Run outside the checkout so nothing but the installed package can be imported; the presets, profiles and
    probe tables must come from the wheel.
    """
    checkout = tmp_path / "checkout"  # a copy, so the build leaves no egg-info or build/ in the tree
    skip = shutil.ignore_patterns(".venv", ".git", "__pycache__", "*.egg-info", "build", "dist", ".*cache*")
    shutil.copytree(ROOT, checkout, ignore=lambda d, names: skip(d, names) | ({"data"} if Path(d) == ROOT else set()))
    build = subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(tmp_path / "dist"),
                            str(checkout)], capture_output=True, text=True, timeout=600)  # sdist, then a wheel from it
    assert build.returncode == 0, build.stdout[-2000:] + build.stderr[-2000:]
    wheel = next((tmp_path / "dist").glob("kvsim-*.whl"))
    env_dir = tmp_path / "venv"
    venv.create(env_dir, system_site_packages=False, with_pip=False, symlinks=True)
    site = next(env_dir.glob("lib/python*/site-packages"))
    for dep in ("simpy", "numpy", "numpy.libs"):  # the runtime needs, taken from this environment (no network)
        src = Path(simpy.__file__).parents[1] / dep
        if src.exists():
            shutil.copytree(src, site / dep)
    unpack = subprocess.run([sys.executable, "-m", "zipfile", "-e", str(wheel), str(site)], capture_output=True, text=True)
    assert unpack.returncode == 0, unpack.stderr
    scenarios = tmp_path / "s.json"
    scenarios.write_text(json.dumps(SCENARIOS))
    work = tmp_path / "elsewhere"
    work.mkdir()
    env_python = env_dir / "bin" / "python"
    assert not (site / "kvsim" / "data" / "calibration").exists()
    for backend in ("mlx-cpu", "mlx-cuda"):
        assert _predict(env_python, scenarios, work, backend) == _predict(Path(sys.executable), scenarios, ROOT, backend)
    shipped = subprocess.run([str(env_python), "-c", "import kvsim.core.paths as p; print(p.PACKAGE_DIR)"],
                             cwd=work, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": ""})
    assert str(site) in shipped.stdout
