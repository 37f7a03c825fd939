"""Ansible-style roles: one folder per role, each a ComponentResource per node fed by the Plan.

A role's `defaults.yaml` holds its variables with their documentation, its `templates/` the files
it renders onto nodes (string.Template: `$name` placeholders, `$$` for a literal dollar).
"""
