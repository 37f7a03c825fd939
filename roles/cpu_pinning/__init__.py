"""The cpu_pinning role (role.py)."""
