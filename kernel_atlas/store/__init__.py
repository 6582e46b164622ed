"""The run folder: atomic files, locks, run ids, the kernels dataset and the derived tables written next to it."""
