"""The fabric role (role.py)."""
