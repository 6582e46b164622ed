"""`--window NAME#K`: K is the instance (from 0, in start order), as HTA's annotation and
instance_id — not the number in a step's name. Campaign AP 6: on a trace whose steps are named
ProfilerStep#4–#6, `ProfilerStep#5` was refused without saying why and `ProfilerStep#1` silently
picked the step named ProfilerStep#5. The refusal now says what K is; a window whose `NAME#K` is
another range's own name says which instance that range is."""

from __future__ import annotations

import pandas as pd
import pytest

from kernel_atlas.analysis.critical_path import window_range
from kernel_atlas.core.errors import AtlasError


def steps(numbers: list[int]) -> pd.DataFrame:
    # step #n from 100·i to 100·i + 90, i its position: instance i is the step named by numbers[i]
    return pd.DataFrame(
        {
            "kind": ["annotation"] * len(numbers),
            "name": [f"ProfilerStep#{n}" for n in numbers],
            "ts_us": [100.0 * i for i in range(len(numbers))],
            "end_us": [100.0 * i + 90 for i in range(len(numbers))],
        }
    )


def test_an_instance_past_the_last_says_what_k_is() -> None:
    with pytest.raises(AtlasError) as refused:
        window_range(steps([4, 5, 6]), ("ProfilerStep", 5))
    assert str(refused.value).endswith(
        "--window ProfilerStep#5: K is the instance, counted from 0 in start order, not the number in a range's "
        "name; the trace has 3 ranges named like 'ProfilerStep' (instances 0–2)"
    )


def test_an_instance_that_is_another_ranges_name_says_which_it_is() -> None:
    # steps #4–#10: instance 5 is the step named #9 (500–590); the step named #5 is instance 1
    start, end, label = window_range(steps([4, 5, 6, 7, 8, 9, 10]), ("ProfilerStep", 5))
    assert (start, end) == (500.0, 590.0)
    assert label == (
        "ProfilerStep#9 (instance 5 of 7; the range named ProfilerStep#5 is instance 1: --window ProfilerStep#1)"
    )


def test_steps_numbered_from_0_read_as_before() -> None:
    # instance k is the step named #k: nothing to add
    assert window_range(steps([0, 1, 2]), ("ProfilerStep", 1)) == (100.0, 190.0, "ProfilerStep#1 (instance 1 of 3)")
