"""``python -m skewscope.cli``."""

from skewscope.cli import main

raise SystemExit(main())
