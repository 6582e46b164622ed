"""Analyses of an ingest output: what bounds the run and what a fix would save."""
