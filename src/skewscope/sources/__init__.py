"""Sources: everything that turns outside data (profiler folders, Prometheus, /metrics) into UnitFrames."""
