"""The base of every error kvsim reports to a user as one line."""

from __future__ import annotations


class KvsimError(ValueError):
    """Bad input a user can fix: ``str(err)`` is one line naming the field and value.

    A ``ValueError`` so callers that caught the older per-module errors as ``ValueError`` keep working.
    """
