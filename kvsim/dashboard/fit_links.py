"""The "Will it fit?" page's URL parameters (``fit_*``): their defaults and one-line checks, so that a bad
value in a shared link is named inline instead of the page silently showing the defaults. No Streamlit."""

from __future__ import annotations

from collections.abc import Collection, Mapping

from kvsim.dashboard.fit_compute import BACKENDS, POLICIES
from kvsim.generation.config import REPO_ID

SOURCES = ("shipped", "config file", "repo id")
KV_BITS = ("none", "2", "3", "4", "5", "6", "8")
MAX_TOKENS = 1 << 22
DEFAULTS: dict[str, str] = {
    "fit_source": "shipped", "fit_model": "qwen3-8b", "fit_repo": "Qwen/Qwen3-8B", "fit_device": "",
    "fit_prompt": "32768", "fit_max": "256", "fit_prefill": "2048", "fit_kv_bits": "none", "fit_max_kv": "0",
    "fit_policy": "mlx-lm", "fit_backend": "device's",
}
"""Each parameter's default, as the URL spells it (a parameter at its default is not in the URL)."""
INT_RANGES = {"fit_prompt": (2, MAX_TOKENS), "fit_max": (1, MAX_TOKENS), "fit_prefill": (1, MAX_TOKENS),
              "fit_max_kv": (0, MAX_TOKENS)}


def check_link(key: str, value: str, devices: Collection[str], shipped: Collection[str]) -> str | None:
    """One line naming ``key`` and ``value`` when the value is not one the widget takes, else None.
    ``devices``: the device labels (the device widget's URL values)."""
    choices: dict[str, Collection[str]] = {
        "fit_source": SOURCES, "fit_model": shipped, "fit_device": devices, "fit_kv_bits": KV_BITS,
        "fit_policy": tuple(POLICIES), "fit_backend": BACKENDS,
    }
    if key in choices and value not in choices[key]:
        shown = ", ".join(choices[key])
        default = "this machine" if key == "fit_device" else repr(DEFAULTS[key])
        return f"link parameter {key}={value!r}: not one of {shown}; showing the default {default}"
    if key in INT_RANGES:
        lo, hi = INT_RANGES[key]
        try:
            n = int(value)
        except ValueError:
            return f"link parameter {key}={value!r}: not a whole number; showing the default {DEFAULTS[key]}"
        if not lo <= n <= hi:
            return f"link parameter {key}={value!r}: must be {lo}..{hi}; showing the default {DEFAULTS[key]}"
    if key == "fit_repo" and not REPO_ID.match(value):
        return f"link parameter {key}={value!r}: not a repo id (owner/name); showing the default {DEFAULTS[key]!r}"
    return None


def check_links(params: Mapping[str, str], devices: Collection[str], shipped: Collection[str]) -> dict[str, str]:
    """{parameter: one line} for each bad ``fit_*`` value in ``params``."""
    out = {}
    for key, value in params.items():
        if key in DEFAULTS:
            line = check_link(key, str(value), devices, shipped)
            if line:
                out[key] = line
    return out
