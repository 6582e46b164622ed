"""Tests of the project as a whole: the import layers, the documentation site."""
