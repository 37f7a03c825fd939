"""The base role (role.py)."""
