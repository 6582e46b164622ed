"""Tests of kernel_atlas.classify."""
