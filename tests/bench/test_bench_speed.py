"""Issue #19's speed targets, measured side by side with the release at 59093ae (``docs/tools/bench_speed.py``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "docs" / "tools" / "bench_speed.py"


@pytest.mark.benchmark
def test_speed_targets_against_59093ae_and_agreement_with_exact() -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), "--repeats", "3"], capture_output=True, text=True, timeout=3600)
    print(done.stdout)
    assert done.returncode == 0, done.stdout + done.stderr
