"""Presentation: rich terminal output and plotly HTML over the analysis tables."""
