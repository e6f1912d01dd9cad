"""No merge-conflict markers in the tree: a half-resolved merge once left both sides of a table
in docs/reliability.md, and every test still passed (a marker is valid Markdown and prose)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MARKER = re.compile(r"^(<{7} |={7}$|>{7} )", re.MULTILINE)


def _tracked_text_files() -> list[Path]:
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout (an sdist): nothing was merged here")
    paths = [ROOT / name for name in listed.decode().split("\0") if name]
    return [
        p
        for p in paths
        if p.suffix in {".md", ".py", ".toml", ".yaml", ".yml", ".cfg", ".sh", ".txt"}
        or p.parent.name == "scripts"
    ]


def test_no_file_holds_a_merge_conflict_marker() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{text.count(chr(10), 0, match.start()) + 1}"
        for path in _tracked_text_files()
        if path.is_file()
        for text in [path.read_text(encoding="utf-8", errors="replace")]
        for match in MARKER.finditer(text)
    ]
    assert found == [], f"merge-conflict markers left in: {', '.join(found)}"
