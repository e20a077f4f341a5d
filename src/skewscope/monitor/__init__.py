"""Continuous monitoring: ``watch`` (live diagnosis, Prometheus exporter, incident history) reads
the Report and never re-implements the method; ``rules`` and ``dashboard`` (``rules.py``,
``dashboard.py``, ``signals.py``) express the method's step 1-2 in PromQL for Prometheus and
Grafana, from the same thresholds (``config.Thresholds``) and dialect tables
(``sources.dialects``)."""
