"""Verification: the Plan's promises checked on the live nodes with testinfra.

`inventory` turns a Plan into the JSON view the checks in verify/checks read; `runner` runs that
suite across the nodes in parallel and `table` renders its per-node, per-check outcome.
"""
