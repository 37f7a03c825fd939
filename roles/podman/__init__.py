"""The podman role (role.py)."""
