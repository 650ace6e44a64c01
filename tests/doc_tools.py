"""The analysis and device scripts under ``docs/tools`` (not in the package), loaded as modules by the tests that
check what they print or predict."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

TOOLS = Path(__file__).resolve().parents[1] / "docs" / "tools"


def load_tool(path: Path) -> ModuleType:
    """``path`` (a script, absolute or under ``docs/tools``) as a module named after its file; registered in
    ``sys.modules`` first, so a dataclass it declares can look its module up. Its ``__main__`` block does not run."""
    path = TOOLS / path
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = sys.modules[path.stem] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
