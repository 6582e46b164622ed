"""Trace bytes → linked kernel tables."""
