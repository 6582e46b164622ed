"""Tests of kernel_atlas.store."""
