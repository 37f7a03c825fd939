"""Monitoring as code: Prometheus config and alert rules, Grafana dashboards and the queries in
them, generated without touching a node (the live lint of those queries is sparkrack.ops)."""
