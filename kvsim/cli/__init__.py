"""The ``kvsim`` command line: ``predict`` (the contract), ``simulate``, ``calibrate``, ``fit``, ``validate``."""

from kvsim.cli.commands import main

__all__ = ["main"]
