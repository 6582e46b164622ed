"""Moved: the recorded-call model lives in `kernel_atlas.ingest.recorded` (one parser for costs,
replay and catalogs). These names stay importable for code written against the old module."""

from kernel_atlas.ingest.recorded import Arg, DType, dtypes, parse_call

__all__ = ["Arg", "DType", "dtypes", "parse_call"]
