"""Analyses of the kernels table: one job per module."""
