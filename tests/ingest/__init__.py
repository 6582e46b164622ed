"""Tests of kernel_atlas.ingest."""
