"""Pulumi resources over SSH: what the roles are made of.

Which kind a step becomes:
- Anything a node keeps, and so can drift (a file, a link, a sysctl, a unit, an image, a
  container, a user, weights), is a resource of ours here whose `read` runs a fact on the node:
  `pulumi preview --refresh` then shows the drift, and the next `up` repairs it.
- A one-shot action with nothing on a node to read back (the verification that ends `up`, a
  local build, a probe) is a `pulumi_command` Command with `triggers`: it runs on create and again
  only when a trigger changes (see `verification.py`).
"""
