"""Tests of kernel_atlas.report."""
