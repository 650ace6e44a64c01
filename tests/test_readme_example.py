"""The README's headline example is what ``kvsim generate`` prints today: its figures drifted once
(17.83 GB shown, 17.71 GB printed) when the model changed and nobody ran it again."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from kvsim.cli import main

README = Path(__file__).resolve().parents[1] / "README.md"


def headline_example() -> tuple[list[str], list[str]]:
    """The first ``$ kvsim generate`` block of the README: its arguments and the output lines it shows."""
    block = re.search(r"```\n\$ kvsim (generate .*?)\n(.*?)```", README.read_text(), re.S)
    assert block, "README.md: no '$ kvsim generate' example"
    shown = [line for line in block.group(2).splitlines() if line.strip() and line.strip() != "..."]
    return shlex.split(block.group(1)), shown


def test_the_readme_headline_prints_what_it_shows(capsys):
    argv, shown = headline_example()
    assert main(argv) == 0
    printed = capsys.readouterr().out.splitlines()
    missing = [line for line in shown if line not in printed]
    assert not missing, f"README.md shows lines kvsim no longer prints: {missing}"
