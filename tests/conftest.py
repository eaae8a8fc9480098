"""Suites of the test run (see tests/suites.py): every test is in the main suite unless it is marked
`browser`, `faults` or `ray`. Tests under tests/faults/ and in files named *browser* or *ray* are marked by
their path, so a new test file slots into its suite by its name; a test may also carry the marker itself."""
from pathlib import Path

import pytest

MARKERS = {"browser": "drives a real browser (Chromium)", "faults": "fault injection: kills, disk full, torn files",
           "ray": "runs on a local Ray cluster"}


def pytest_configure(config):
    for name, what in MARKERS.items(): config.addinivalue_line("markers", f"{name}: {what}")


def suite_of(path: Path) -> str:
    "The marked suite a test file belongs to by its path ('' for the main suite)."
    parts = [p.lower() for p in Path(path).parts]
    if "faults" in parts[:-1]: return "faults"
    if "browser" in parts[-1]: return "browser"
    if "ray" in parts[:-1] or any(w == "ray" for w in Path(parts[-1]).stem.split("_")): return "ray"
    return ""


def pytest_collection_modifyitems(config, items):
    tests = Path(__file__).resolve().parent
    for item in items:
        path = Path(str(item.path)).resolve()
        suite = suite_of(path.relative_to(tests) if path.is_relative_to(tests) else Path(path.name))
        if suite: item.add_marker(getattr(pytest.mark, suite))
