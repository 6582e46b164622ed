"""Tests of kernel_atlas.analysis."""
