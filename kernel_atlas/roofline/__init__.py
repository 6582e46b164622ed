"""Costs (FLOPs, bytes), device peaks and reports."""
