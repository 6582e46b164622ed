"""A roofline row above 100 % SOL is said in the trust lines (campaign AT 5): vLLM's gpt-oss
sliding-window attention, costed over the whole context the trace records, showed SOL 158.6 %
with no word — a cost that counts more work than the kernel did is no measure of the kernel."""

from __future__ import annotations

import numpy as np
import pandas as pd

from kernel_atlas.analysis.trust import trust_facts
from kernel_atlas.report.trust_view import trust_lines


def roofline(sol: list[float], time_us: list[float]) -> pd.DataFrame:
    n = len(sol)
    return pd.DataFrame(
        {
            "name": [f"kernel_{chr(97 + i)}" for i in range(n)],
            "launcher": ["aten::mm"] * n,
            "role": ["main"] * n,
            "note": [""] * n,
            "op_time_us": time_us,
            "sol_pct": sol,
        }
    )


FACTS = {"gpu_time_us": 100.0, "costed_time_us": 60.0}
SUMMARY = {"traces": [{"shapes": "yes"}]}


def test_rows_above_their_roof_are_counted_with_their_time() -> None:
    # rows at 50 %, 150 %, 250 % and unknown SOL, 10/20/30/40 µs of a 100 µs run: the two above
    # the roof hold 20 + 30 = 50 µs (50 %), the highest 250 % (kernel_c)
    trust = trust_facts(roofline([50.0, 150.0, 250.0, np.nan], [10.0, 20.0, 30.0, 40.0]), FACTS, SUMMARY)
    assert trust["above_roof"] == {
        "rows": 2,
        "time_us": 50.0,
        "pct": 50.0,
        "max_sol_pct": 250.0,
        "max_name": "kernel_c",
    }
    (line,) = [line for line in trust_lines(trust) if "above the roof" in line]
    assert line.startswith("  above the roof: 2 roofline rows (50.0 µs, 50.0 % of GPU time) ran faster than")
    assert "up to SOL 250.0 % (kernel_c)" in line


def test_a_run_within_its_roofs_says_nothing_of_it() -> None:
    # exactly 100 % is at the roof, not above it
    trust = trust_facts(roofline([50.0, 100.0], [10.0, 20.0]), FACTS, SUMMARY)
    assert trust["above_roof"] is None
    assert not [line for line in trust_lines(trust) if "above the roof" in line]
