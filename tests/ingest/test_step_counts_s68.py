"""A serving engine's step annotation whose count has thousands of digits (damage: `int` refuses
past 4,300) leaves that field unread, as if not given — it had raised ValueError out of ingest."""

from __future__ import annotations

from kernel_atlas.ingest.steps import parse_step


def test_a_count_of_thousands_of_digits_is_left_unread() -> None:
    huge = "9" * 5000
    found = parse_step(
        f"step[MIXED bs=2 c=1 g=1 c_sq={huge} c_sk=8 c_sqsq=25 c_sqsk=40 g_sq=1 g_sk=12 g_sqsq=1 g_sqsk=12]"
    )
    assert found is not None and found.engine == "SGLang"
    assert found.c_sk == 8 and found.c_sqsq == 25 and found.g_sk == 12  # the other fields as written
    assert found.c_sq == 0  # the damaged one not read: as a field the annotation does not give

    vllm = f"execute_2_context_1(sq5sk8sqsq{huge}sqsk40)_generation_1(sq1sk12sqsq1sqsk12)"
    found = parse_step(vllm)
    assert found is not None and found.g_sk == 12 and found.c_sk == 8
