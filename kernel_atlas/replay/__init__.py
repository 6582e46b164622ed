"""Replaying recorded kernels on a device (needs the `replay` extra)."""
