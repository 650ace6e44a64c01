"""Test-wide settings: hypothesis checks properties, not speed (benchmarks live in scripts/ and are
marked ``benchmark``), so no example has a deadline: a loaded CI machine must not fail a correct test."""

from hypothesis import settings

settings.register_profile("kvsim", deadline=None)
settings.load_profile("kvsim")
