"""Analyses over the ingested tables (each module one analysis)."""
