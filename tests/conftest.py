import sys
from pathlib import Path

from hypothesis import settings

sys.path.insert(0, str(Path(__file__).parent))

# CI shares two cores with servers the tests start: judge properties, not per-example speed.
settings.register_profile("shared-cores", deadline=None)
settings.load_profile("shared-cores")
