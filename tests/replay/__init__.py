"""Tests of kernel_atlas.replay."""
