"""Kernel → (op_mapping, category) with provenance, from rules kept as data in catalogs/."""
