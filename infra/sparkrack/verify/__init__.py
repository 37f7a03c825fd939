"""Verification: the Plan's promises checked on the live nodes with testinfra.

`inventory` turns a Plan into the JSON view the suite in tests/infra reads; `runner` runs that
suite across the nodes in parallel and `table` renders its per-node, per-check outcome.
"""
