"""Continuous monitoring: ``watch`` (live diagnosis, Prometheus exporter, incident history),
alerting rules and dashboards. Everything here reads the Report; nothing re-implements the
method."""
