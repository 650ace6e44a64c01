"""Where kvsim's files live.

Everything read at run time (model presets, fitted profiles, probe tables) ships inside the package under
``kvsim/data`` so a wheel predicts what a checkout does. Measurement data (calibration sweeps, held-out
runs) stays in the repository's ``data/`` folder: only ``kvsim calibrate``, ``fit`` and ``validate`` read it.
"""

from __future__ import annotations

from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent.parent
"""The installed ``kvsim`` package."""

PACKAGE_DATA_DIR = PACKAGE_DIR / "data"
"""Runtime data shipped in the wheel: ``models/``, ``profiles/``, ``probes/``."""

MODELS_DIR = PACKAGE_DATA_DIR / "models"
"""Model presets, ``<name>.json``, each citing its public source."""

PROFILES_DIR = PACKAGE_DATA_DIR / "profiles"
"""Fitted backend profiles, ``<backend>.json``."""

REPO_DIR = PACKAGE_DIR.parent
"""The checkout holding the package (for an installed wheel: site-packages, where no ``data/`` exists)."""

REPO_DATA_DIR = REPO_DIR / "data"
"""Measurement data of a checkout: calibration sweeps, held-out runs, probes. See ``data/manifest.json``."""

CALIBRATION_DIR = REPO_DATA_DIR / "calibration"
"""Where ``kvsim calibrate`` writes and ``kvsim fit`` reads by default."""
