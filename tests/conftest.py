"""tests/ray is a suite of its own (it needs the `ray` extra and a Ray cluster it starts): `python -m pytest -q tests`
leaves it out; `python -m pytest -q tests/ray` runs it."""
from pathlib import Path

RAY_SUITE = Path(__file__).parent / "ray"


def pytest_ignore_collect(collection_path, config):
    "Leave tests/ray out unless the command line names it (or something inside it)."
    if RAY_SUITE not in (collection_path, *collection_path.parents): return None
    asked = [Path(a.split("::")[0]).resolve() for a in config.args]
    return not any(a == RAY_SUITE or RAY_SUITE in a.parents for a in asked) or None
