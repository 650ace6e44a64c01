"""Test-wide settings: hypothesis checks properties, not speed (benchmarks live in docs/tools/ and are
marked ``benchmark``), so no example has a deadline: a loaded CI machine must not fail a correct test."""

import os

from hypothesis import settings

# The dashboard's views answer within a budget and fill in later (kvsim.dashboard.runner); the tests check
# complete views, so they wait as long as it takes. tests/bench/test_bench_dashboard.py times the real budget.
os.environ.setdefault("KVSIM_ANSWER_BUDGET_S", "300")

settings.register_profile("kvsim", deadline=None)
settings.load_profile("kvsim")
