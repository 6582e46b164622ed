"""Campaign BE, class 9d: the AWS key-id prefix `ACCA` is itself hex, so an upper-case hex hash in a
kernel name holding `ACCA` and 12 more hex characters lost its tail to `<redacted>` (213 of 20,200
wide names), and two kernels differing only past it merged. An AWS id is base32 (A–Z, 2–7): one
made only of hex characters is a hash, not a key."""

from __future__ import annotations

from kernel_atlas.core.redact import REDACTED, holds_credential, redact_text

# a wide kernel name as the campaign's Nsight export wrote them: `void wide_kernel_<i>_<hex>`
HASHED = "void wide_kernel_17_03669CA10253593AB7583CBFBB44C03A2EACCA5B0E9D41F27C6A83B1D0E5F9"


def test_an_upper_case_hex_hash_holding_acca_is_kept_and_aws_key_ids_are_not() -> None:
    for name in (
        HASHED,
        "void wide_kernel_18_ACCA0123456789ABCDEF0123",  # the hash begins with ACCA, after `_`
        "ACCA0123456789ABCDEF",  # a whole text of 20 hex characters
        "kernel<ACCAFFFFEEEEDDDD1234>",
    ):
        assert redact_text(name) == name
        assert not holds_credential(name)
    # two names that differ past the run stay two names
    assert redact_text(HASHED + "_a") != redact_text(HASHED + "_b")
    # ... while AWS key ids are still redacted, alone and glued to a word
    assert redact_text("AKIAIOSFODNN7EXAMPLE") == REDACTED  # AWS's documented example id
    assert redact_text("key ACCAIOSFODNN7EXAMPLE x") == f"key {REDACTED} x"  # ACCA with base32 letters past F
    assert redact_text("opAKIAIOSFODNN7EXAMPLE x") == f"op{REDACTED} x"
    assert redact_text("id=ACCAQQHOSTILE50XYZW;") == f"id={REDACTED};"
    assert redact_text("AKIA0123456789ABCDEF") == REDACTED  # a prefix that is not hex: hex digits after it still count
