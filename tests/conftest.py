import os
import sys
from pathlib import Path

from hypothesis import settings

sys.path.insert(0, str(Path(__file__).parent))

# CI shares two cores with servers the tests start: judge properties, not per-example speed.
settings.register_profile("shared-cores", deadline=None)
# In CI the examples are derandomized: a red build is reproducible, never a roll of the dice.
settings.register_profile("ci", deadline=None, derandomize=True, print_blob=True)
settings.load_profile("ci" if os.environ.get("CI") else "shared-cores")


def pytest_collection_modifyitems(config, items):  # type: ignore[no-untyped-def]
    """Heavy tests are opt-in: without ``-m`` selecting them they are deselected (not skipped)."""
    if config.getoption("-m"):
        return
    heavy = [i for i in items if i.get_closest_marker("heavy")]
    if heavy:
        config.hook.pytest_deselected(items=heavy)
        items[:] = [i for i in items if not i.get_closest_marker("heavy")]
