"""What the code and its output cite is something a reader of the repository can open: a
seed file (``seed 002 Eq. 4``), a datasheet, a doc section (``docs/physics.md``) or the
behaviour itself, never a tracker's issue number; test files are named by the subject they
check, not by the review that asked for them."""
from __future__ import annotations

import re
from pathlib import Path

from test_faults import run

ROOT = Path(__file__).resolve().parents[1]
ISSUE = re.compile(r"\b[Ii]ssues? [0-9]+")


def _cited_issues(folder: Path) -> list[str]:
    """``path:line: text`` of every line of the Python files under ``folder`` that cites an
    issue number."""
    return [f"{p.relative_to(ROOT)}:{i}: {line.strip()}"
            for p in sorted(folder.rglob("*.py"))
            for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
            if ISSUE.search(line)]


def test_the_addon_cites_no_issue_numbers():
    assert _cited_issues(ROOT / "blensor_addon") == []


def test_examples_and_benchmarks_cite_no_issue_numbers():
    assert _cited_issues(ROOT / "examples") + _cited_issues(ROOT / "benchmarks") == []


def test_the_sensor_listing_cites_no_issue_numbers():
    res = run("sensors")
    assert res.returncode == 0, res.stderr
    assert "preset file (Pattern file): " in res.stdout
    assert [ln for ln in res.stdout.splitlines() if ISSUE.search(ln)] == []



def test_no_test_file_is_named_after_a_review():
    # (a word of the name: test_preview.py is about previews)
    named = [p.name for p in (ROOT / "tests").glob("*.py") if re.search(r"(^|_)review(\d|_|\.)", p.name)]
    assert named == []
    assert re.search(r"(^|_)review(\d|_|\.)", "test_review22.py") and re.search(
        r"(^|_)review(\d|_|\.)", "test_device_review.py")
