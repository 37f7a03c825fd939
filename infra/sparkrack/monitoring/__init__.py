"""Monitoring as code: Prometheus config and alert rules, Grafana dashboards, and the lint that
runs every panel query against the live Prometheus."""
