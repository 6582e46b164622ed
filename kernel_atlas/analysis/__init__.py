"""Analyses of a run's tables, each module taking tables and returning tables: time share views,
waits and idle, launches, collectives across ranks, diff and its gate, findings."""
