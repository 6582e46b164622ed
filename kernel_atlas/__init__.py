"""Kernel Atlas: where a PyTorch model's GPU time goes, kernel by kernel."""

__version__ = "0.1.0"
