"""Policy parameter specs for the dashboard's widgets and sweeps (pure)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from policies.parse import QUANT_BITS, QUANT_GROUPS


@dataclass(frozen=True, slots=True)
class Param:
    """One policy field as a widget.

    Args:
        field: The contract's field name.
        kind: ``int``, ``float``, ``choice`` or ``cap`` (blank, ``context`` or a row count).
        default: The widget's initial value.
        choices: Allowed values for ``choice``.
    """

    field: str
    kind: str
    default: Any
    choices: tuple[Any, ...] = ()

    @property
    def sweepable(self) -> bool:
        return self.kind in ("int", "float")


PARAMS: dict[str, tuple[Param, ...]] = {
    "step": (Param("step", "int", 256),),
    "prealloc": (Param("max_size", "int", 4096), Param("step", "int", 256)),
    "geometric": (Param("seed_rows", "int", 256), Param("factor", "float", 2.0), Param("cap", "cap", "")),
    "full": (),
    "paged": (Param("block_rows", "int", 16),),
    "rotating": (Param("max_size", "int", 4096), Param("keep", "int", 0), Param("step", "int", 256)),
    "quantized": (Param("step", "int", 256), Param("bits", "choice", 8, QUANT_BITS), Param("group_size", "choice", 64, QUANT_GROUPS)),
    "lowpeak": (Param("step", "int", 256),),
}
NO_AXIS = "(none)"
# Default sweep axes and values per policy: (x field, x values, y field, y values).
SWEEP_DEFAULTS: dict[str, tuple[str, str, str, str]] = {
    "step": ("step", "64, 128, 256, 512, 1024", NO_AXIS, ""),
    "prealloc": ("step", "64, 256, 1024", "max_size", "512, 2048, 8192"),
    "geometric": ("factor", "1.5, 2, 4", "seed_rows", "64, 256, 1024"),
    "paged": ("block_rows", "16, 64, 256", NO_AXIS, ""),
    "rotating": ("step", "64, 256, 1024", "max_size", "1024, 4096"),
    "quantized": ("step", "64, 256, 1024", "bits", "4, 8"),
    "lowpeak": ("step", "64, 128, 256, 512, 1024", NO_AXIS, ""),
}
SWEEP_POLICIES: tuple[str, ...] = tuple(SWEEP_DEFAULTS)


def parse_cap(text: str, where: str = "geometric cap") -> int | str | None:
    """A cap cell: blank means none, ``context`` the full context, else a row count.

    Raises:
        ValueError: one line naming the field and the text.
    """
    text = text.strip()
    if not text:
        return None
    if text == "context":
        return "context"
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{where}: must be a whole number, 'context' or blank, got {text!r}") from None
    if not value.is_integer():
        raise ValueError(f"{where}: must be a whole number, 'context' or blank, got {text!r}")
    return int(value)
