"""Tests of kernel_atlas.roofline."""
