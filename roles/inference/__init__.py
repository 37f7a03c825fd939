"""The inference role (role.py)."""
