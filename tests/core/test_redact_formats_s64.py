"""Credential formats campaign AL found passing `core/redact.py` untouched (class 5): a PGP
private key block (the pattern wanted `KEY-----` right after `PRIVATE`; PGP writes `PRIVATE KEY
BLOCK-----`), a Slack app-level token, an Azure storage connection string's `AccountKey=`, and
webhooks, Groq, Vault, Docker, GitLab's other prefixes, SendGrid, Replicate, Shopify, Telegram,
`DB_PASS=`-style environment keys, `x-auth-token:`, S3's and Azure's signed URLs. Each is written
out here with the text redaction must give; ordinary names that look a little like them are kept.
Tokens are split so that no scanner trips over this file."""

from __future__ import annotations

import copy
import gzip
import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from kernel_atlas.core import redact
from kernel_atlas.core.redact import REDACTED, json_holds_credential, redact_document, redact_text
from tests.support.hostile import cli
from tests.support.traces import EXAMPLE

R = REDACTED
PGP_BODY = "lQOYBGV0dGVzdGtleWJvZHlmb3JwZ3Bwcml2YXRla2V5YmxvY2sxMjM0NQ"
PGP = "-----BEGIN PGP " + "PRIVATE KEY BLOCK-----\n\n" + PGP_BODY + "\n=Ab3x\n-----END PGP PRIVATE KEY BLOCK-----"
XAPP = "xapp-" + "1-A0123456789-1234567890123-" + "abcdef0123456789" * 4
ACCOUNT_KEY = "Zm9vYmFyYmF6cXV4" * 4 + "Zm9vYmFyYmF6cXV4Zm9vYg=="  # 88 characters of base64
AZURE = (
    "DefaultEndpointsProtocol=https;AccountName=acct;"
    + "AccountKey="
    + ACCOUNT_KEY
    + ";EndpointSuffix=core.windows.net"
)


@pytest.mark.parametrize(
    ("text", "redacted"),
    [
        # PGP's private key block, whole, and one whose end was cut off
        (f"arg0 {PGP} then", f"arg0 {R} then"),
        ("-----BEGIN PGP " + "PRIVATE KEY BLOCK-----\n" + PGP_BODY, R),
        # Slack: an app-level token, glued to a kernel's template too; an incoming webhook
        (f"gemm_kernel<{XAPP}>", f"gemm_kernel<{R}>"),
        (f"gemm_kernel{XAPP}", f"gemm_kernel{R}"),
        ("post https://hooks.slack.com/" + "services/T00000000/B00000000/" + "X" * 24 + " ok", f"post https://{R} ok"),
        # Azure: a storage connection string keeps its other fields; a SAS URL keeps its other parameters
        (AZURE, f"DefaultEndpointsProtocol=https;AccountName=acct;AccountKey={R};EndpointSuffix=core.windows.net"),
        ("Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=root;" + "SharedAccessKey=" + "aB3+" * 11,
         f"Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=root;SharedAccessKey={R}"),
        ("https://acct.blob.core.windows.net/c/b?sv=2021-08-06&sp=r&" + "sig=" + "AbC%2BdEf%2F" * 4 + "%3D&se=1",
         f"https://acct.blob.core.windows.net/c/b?sv=2021-08-06&sp=r&sig={R}&se=1"),
        ("az storage blob list --account-key " + ACCOUNT_KEY, f"az storage blob list --account-key {R}"),
        # S3's presigned URL: its signature and session token (the key id is an AWS format)
        ("https://b.s3.amazonaws.com/k?X-Amz-Algorithm=AWS4-HMAC-SHA256&" + "X-Amz-Signature=" + "0a1b" * 16 + "&x=1",
         f"https://b.s3.amazonaws.com/k?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Signature={R}&x=1"),
        ("?X-Amz-Date=20240101T000000Z&" + "X-Amz-Security-Token=" + "IQoJb3JpZ2lu" * 4,
         f"?X-Amz-Date=20240101T000000Z&X-Amz-Security-Token={R}"),
        # Groq, HashiCorp Vault, Docker Hub
        ("GROQ " + "gsk_" + "aB3dE5gH7jK9mN1pQ3sT5vX7zA9cE1gI3kM5oQ7sU9wY1aC3eG5h", f"GROQ {R}"),
        ("vault " + "hvs." + "CAESIJk3Lp9Qx2" * 7, f"vault {R}"),
        ("hvb." + "AAAAAQ" * 25 + " batch", f"{R} batch"),
        ("gemm_kernel<" + "dckr_pat_" + "Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2Ji1>", f"gemm_kernel<{R}>"),
        # GitLab's prefixes besides glpat-
        ("gemm_kernel<" + "glptt-" + "a1b2c3d4e5" * 4 + ">", f"gemm_kernel<{R}>"),
        ("gldt-" + "Xy12" * 5, R),
        ("glrt-" + "t1_" + "Ab_-" * 5 + ".01abcdefg", f"{R}.01abcdefg"),
        ("gloas-" + "0f" * 32, R),
        ("glcbt-" + "64_" + "Ab12" * 5, R),
        ("glft-" + "abCD" * 5, R),
        ("glimt-" + "q" * 25, R),
        ("glagent-" + "Zz9" * 17, R),
        ("glsoat-" + "Ab12" * 5, R),
        ("glffct-" + "Ab12" * 5, R),
        ("GR1348941" + "Ab12" * 5, R),
        ("Cookie: " + "_gitlab_session=" + "0a1b2c3d" * 4, f"Cookie: {R}"),
        # SendGrid: two dot-separated base64url parts of 22 and 43 characters
        ("key SG." + "aB3dE5gH7jK9mN1pQ3sT5v" + "." + "Xy1_" * 10 + "Z-9", f"key {R}"),
        # Replicate (not where r8_ ends a word), Shopify
        ("REPLICATE r8_" + "Ab3" * 12 + "C", f"REPLICATE {R}"),
        ("shpat_" + "0a1B" * 8, R),
        ("shpss_" + "ffee" * 8, R),
        ("shpca_" + "0123" * 8, R),
        ("shppa_" + "abcd" * 8, R),
        # Discord's webhook, a Telegram bot token in its API URL
        ("https://discord.com/api/" + "webhooks/123456789012345678/" + "aB_-" * 17, f"https://{R}"),
        ("https://discordapp.com/api/v10/" + "webhooks/12345678901234567/" + "Zz09" * 17 + " x", f"https://{R} x"),
        ("https://api.telegram.org/bot" + "110201543:AA" + "HdqTcvCH1vGWJxfSeofSAs0K5PALDsaw" + "/getMe",
         f"https://api.telegram.org/bot{R}/getMe"),
        # environment variables named for a secret (upper case, the whole name), HTTP headers
        ("DB_PASS=hunter2 next", f"DB_PASS={R} next"),
        ('{"SMTP_PW": "two words"}', f'{{"SMTP_PW": "{R}"}}'),
        ("HF_TOKEN: abc123", f"HF_TOKEN: {R}"),
        ("GPG_PASSPHRASE = open sesame", f"GPG_PASSPHRASE = {R} sesame"),
        ("export MY_APP_SSH_KEY=abc123", f"export MY_APP_SSH_KEY={R}"),
        ("x-auth-token: abc123", f"x-auth-token: {R}"),
        ("X-Access-Token: abc123", f"X-Access-Token: {R}"),
        ("PRIVATE-TOKEN: abc123", f"PRIVATE-TOKEN: {R}"),
    ],
)  # fmt: skip
def test_a_credential_format_is_redacted(text: str, redacted: str) -> None:
    assert redact_text(text) == redacted


@pytest.mark.parametrize(
    "kept",
    [
        # names, paths and frames shaped a little like the formats above
        "post_grad_pass=1",  # an environment key must be upper case
        "compute_cache_key: x",
        "sort_key=3",
        "conv_pw_13/Conv2D",
        "MAX_TOKENS=4096",  # not a name ending in _TOKEN
        "f(sig=3)",  # `sig=` only as a URL's query parameter
        "https://host/a?signal=3",
        "msg.py(12): send",
        "SG.layer1.conv",
        "hvs.py(3): f",
        "void (anonymous namespace)::resolve_future_token_ids_kernel<long>(long*, long)",
        "/sgl-workspace/sglang/python/sglang/srt/mem_cache/memory_pool.py(1010): _get_key",
        "cutlass_80_tensorop_tr8_" + "a" * 37,  # r8_ ending a word
        "bot12345:abc",  # a Telegram token's AA and 35 characters are missing
        "https://hooks.slack.com/services/",  # no hook in it
        "-----BEGIN PGP PUBLIC KEY BLOCK-----\nmQENBF\n-----END PGP PUBLIC KEY BLOCK-----",
        "X-Amz-Date=20240101T000000Z",
        "gl_kernel-ab12",
    ],
)
def test_an_ordinary_name_is_kept(kept: str) -> None:
    assert redact_text(kept) == kept


class _Refusing:
    """Stands in for the expression: any search of it fails the test."""

    def search(self, text: str) -> None:
        raise AssertionError(f"the expression searched a text without needles: {text!r}")

    sub = search


@pytest.mark.parametrize(
    "name",
    [
        "void (anonymous namespace)::resolve_future_token_ids_kernel<long>(long*, long)",
        "/sgl-workspace/sglang/python/sglang/srt/mem_cache/memory_pool.py(1010): _get_key",
        "conv_pw_13/Conv2D",
        "aten::_foreach_add_",
    ],
)
def test_a_name_without_needles_never_reaches_the_expression(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The new formats' needles are precise (`pass=`, not `_pass`; `:aa`, not a digit): a kernel
    name holding `_token` or a frame holding `_key` is passed over without the expression."""
    monkeypatch.setattr(redact, "CREDENTIAL", _Refusing())
    redact._may_hold_credential.cache_clear()
    try:
        assert redact_text(name) == name
    finally:
        redact._may_hold_credential.cache_clear()


def test_a_quoted_key_in_json_text_is_screened() -> None:
    """A string holding JSON (`{"token": "…"}`) is written `{\\"token\\": …}` in an output's JSON
    text: the needle `token"` was looked for only with a bare quote, so the text was called clean
    and written as it was."""
    for inner in ('{"token": "abc123"}', '{"DB_PASS": "hunter2"}'):
        document = {"args": inner}
        assert json_holds_credential(json.dumps(document)), inner
    assert redact_document({"args": '{"token": "abc123"}'}) == {"args": f'{{"token": "{R}"}}'}


# --- end to end: ingest + report --------------------------------------------------------------------


def _texts(file: Path) -> str:
    """A file's content as text; a parquet file's cells too (its pages are compressed)."""
    text = file.read_bytes().decode("utf-8", "replace")
    if file.suffix == ".parquet":
        frame = pd.read_parquet(file)
        text += "\n".join(frame[column].astype(str).str.cat(sep="\n") for column in frame.columns)
    return text


def test_planted_credentials_reach_no_output(tmp_path: Path) -> None:
    """A PGP block in `Concrete Inputs`, a Slack app token in a kernel's name and an Azure account
    key in the trace's metadata (campaign AL's cases): none in any file ingest and report write."""
    doc: dict[str, Any] = json.loads(gzip.decompress(EXAMPLE.read_bytes()))
    doc = copy.deepcopy(doc)
    kernels = [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]
    launched = {e["args"].get("External id") for e in kernels}
    op = next(
        e for e in doc["traceEvents"]
        if e.get("cat") == "cpu_op" and e["name"] == "aten::addmm" and e["args"].get("External id") in launched
    )  # fmt: skip
    op["args"]["Concrete Inputs"] = ["", PGP, "1"]
    kernel_name = kernels[0]["name"]
    for event in kernels:  # every launch of that kernel, so it is one name
        if event["name"] == kernel_name:
            event["name"] = f"gemm_kernel<{XAPP}>"
    doc["deviceProperties"][0]["name"] = f"NVIDIA H100 {AZURE}"
    doc["distributedInfo"] = {"rank": 0, "world_size": 1, "backend": f"nccl {AZURE}"}
    trace = tmp_path / "t.json"
    trace.write_text(json.dumps(doc))
    out = tmp_path / "o"
    printed = [cli("ingest", trace, "-o", out, "--wide"), cli("report", out, "--wide")]
    assert [p.code for p in printed] == [0, 0], printed
    secrets = [PGP_BODY, "PRIVATE KEY BLOCK", XAPP, XAPP[20:], ACCOUNT_KEY]
    files = [f for f in out.rglob("*") if f.is_file()]
    assert any(f.suffix == ".parquet" for f in files)
    for file in files:
        text = _texts(file)
        for secret in secrets:
            assert secret not in text, (file, secret)
    for result in printed:
        for secret in secrets:
            assert secret not in result.stdout + result.stderr
    frame = pd.read_parquet(out / "kernels.parquet")
    assert f"gemm_kernel<{R}>" in set(frame["name"].astype(str))
    assert f'["","{R}","1"]' in set(frame["concrete_inputs"].dropna().astype(str))
    summary = (out / "summary.json").read_text()
    assert f"AccountKey={R};EndpointSuffix=core.windows.net" in summary
