"""Shared fixtures: the real traces live in ../shared/traces (skipped cleanly when absent)."""

from __future__ import annotations

import functools
import gzip
import json
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
TRACES = REPO.parent / "shared" / "traces"
SEED = REPO.parent / "shared" / "seed" / "kernels.json"
EXAMPLE = REPO / "examples" / "h100_bert_small_infer.json.gz"

GPU_TRACES = [
    "a100_alexnet_train",
    "a100_cudagraph_rank0",
    "a100_diff_control",
    "a100_nccl_8rank_rank0",
    "a100_triton_compile_tiny",
    "h100_bert_small_infer",
    "h100_vit_image_classify_infer",
    "mi210_gpu_only",
    "mi250_minitoy_train",
    "mi300x_normalization_layers",
    "mi300x_sglang_qwen3_8b_decode_graph",
    "mi300x_torch_compile_llama_block",
    "v100_diff_test",
]


def trace_path(stem: str) -> Path:
    """A shared trace's path; the test calling it is skipped when the trace is absent (call it
    inside a test or fixture: at import it would skip the whole module)."""
    path = TRACES / f"{stem}.json.gz"
    if not path.exists():
        pytest.skip(f"shared trace {path} not available")
    return path


def has_trace(stem: str) -> bool:
    """Whether a shared trace is here (for `skipif` marks, evaluated at import)."""
    return (TRACES / f"{stem}.json.gz").exists()


@functools.cache
def raw_events(stem: str) -> list[dict[str, Any]]:
    """The trace's events as plain JSON, read independently of kernel_atlas."""
    with gzip.open(trace_path(stem)) as handle:
        doc = json.load(handle)
    return doc["traceEvents"] if isinstance(doc, dict) else doc


@functools.cache
def ingested(stem: str):  # -> IngestResult
    from kernel_atlas.ingest.pipeline import ingest_trace

    return ingest_trace(trace_path(stem))
