"""The monitoring role (role.py)."""
