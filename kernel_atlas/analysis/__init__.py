"""Analyses of the kernels table and the trace: efficiency, steps, critical path, memory."""
