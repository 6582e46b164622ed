"""Which errors are the system refusing a resource (`errors.system_refusal`): one line of ours, and
for memory an exit that skips the C libraries' exit handlers (`process_life.leave`)."""

from __future__ import annotations

import errno
import os

from kernel_atlas.core.errors import OUT_OF_MEMORY, TOO_MANY_FILES, system_refusal


def test_memory_refused_however_it_surfaces() -> None:
    assert system_refusal(MemoryError()) == OUT_OF_MEMORY
    assert system_refusal(ImportError("libarrow.so: failed to map segment from shared object")) == OUT_OF_MEMORY
    # a library's folder listed as it loads, under `ulimit -v`: "pandas/core: Cannot allocate memory"
    listing = OSError(errno.ENOMEM, os.strerror(errno.ENOMEM), "/venv/site-packages/pandas/core")
    assert system_refusal(listing) == OUT_OF_MEMORY
    # a C library that could not allocate and returned without an exception, as Python reports it
    assert system_refusal(SystemError("error return without exception set")) == OUT_OF_MEMORY
    nulled = SystemError("<function report at 0x7f> returned NULL without setting an exception")
    assert system_refusal(nulled) == OUT_OF_MEMORY


def test_a_file_s_own_problem_is_not_a_refusal() -> None:
    assert system_refusal(ImportError("libcrypto.so.3: Too many open files")) == TOO_MANY_FILES
    assert system_refusal(FileNotFoundError(errno.ENOENT, "No such file or directory", "trace.json")) is None
    assert system_refusal(PermissionError(errno.EACCES, "Permission denied", "trace.json")) is None
    assert system_refusal(ValueError("bad")) is None
    assert system_refusal(SystemError("bad argument to internal function")) is None
