"""Analyses over the tables of a run: each module takes tables and returns tables."""
