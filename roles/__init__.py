"""Ansible-style roles: one folder per role, each a ComponentResource per node fed by the Plan.

A role's settings are the Plan's (`plan.roles`, from the stack's `roles:` section, validated in
sparkrack.stackspec.roles, where each default is documented); its `templates/` are the files it
renders onto nodes (string.Template: `$name` placeholders, `$$` for a literal dollar).
"""
