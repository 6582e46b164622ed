"""Analyses of the kernels table: time share views, waits and idle, launches, collectives across ranks, diff."""
