"""`Beside.result` with bounds: the child is killed past its time or its resident memory,
whatever its work does (a C call that checks no timer, an allocation no allocator limit sees)."""

from __future__ import annotations

import os
import sys
import time

import pytest

from kernel_atlas.core.beside import Beside, OverBound, resident_bytes

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="bounds read /proc (Linux)")


def test_a_child_past_its_time_is_killed() -> None:
    start = time.monotonic()
    child: Beside[int] = Beside(lambda _: time.sleep(60) or 1)  # a sleep checks no timer of ours
    with pytest.raises(OverBound) as caught:
        child.result(seconds=0.5)
    assert caught.value.bound == "time"
    assert time.monotonic() - start < 10
    assert child._process.exitcode is not None  # gone, not left running


def test_a_child_past_its_memory_is_killed() -> None:
    def grow(_: object) -> int:
        held = []
        for _ in range(64):  # 64 × 64 MiB, written so that every page is resident
            held.append(bytearray(b"x") * (64 << 20))
        return len(held)

    child: Beside[int] = Beside(grow)
    with pytest.raises(OverBound) as caught:
        child.result(max_growth_bytes=256 << 20)
    assert caught.value.bound == "memory"
    assert child._process.exitcode is not None


def test_within_its_bounds_a_child_hands_back_its_value() -> None:
    child: Beside[list[int]] = Beside(lambda _: [1, 2, 3])
    assert child.result(seconds=30, max_growth_bytes=512 << 20) == [1, 2, 3]


def test_resident_bytes_of_a_process_that_is_gone_is_zero() -> None:
    assert resident_bytes(2**22 + 12345) == 0
    assert resident_bytes(os.getpid()) > 0


def test_what_the_child_shares_with_its_parent_does_not_count() -> None:
    """A parent holding 600 MiB forks a child bounded at 200 MiB of growth: the child reads and
    rewrites the parent's pages (each write copies a page, the count unchanged) and finishes."""
    held = bytearray(600 << 20)
    held[::4096] = b"x" * len(held[::4096])  # resident

    def rewrite(_: object) -> int:
        held[1::4096] = b"y" * len(held[1::4096])
        return len(held)

    assert Beside(rewrite).result(seconds=60, max_growth_bytes=200 << 20) == 600 << 20
