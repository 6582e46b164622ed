"""Credentials never reach an output: values in well-known credential formats become `<redacted>`.

Traces carry strings from the profiled process: `Concrete Inputs` (the values of string
arguments), metadata fields, names. A token pasted into a prompt or an environment dump must
not be copied into kernels.parquet, catalog.json, summary.json, the report files or the
terminal. Metadata fields whose *key* names a secret are dropped separately
(`ingest.summary.safe_fields`); this module catches the *values*, wherever they appear: the
matching part of a string is replaced, the rest is kept (`['<redacted>', '0']`).
"""

from __future__ import annotations

import json
import re
import unicodedata
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import numpy as np

from kernel_atlas.core.texts import strings_in, trie_pattern

if TYPE_CHECKING:  # pandas is imported where a frame is redacted: saying an error never waits for it
    import pandas as pd

    from kernel_atlas.core.errors import AtlasError

REDACTED = "<redacted>"

# A format whose prefix is common inside words (`sk-` in `risk-management-…`, `pk_test_`,
# `npm_`, `xox`) is taken only where it is not the tail of a longer word; after a digit it is
# one (`ProfilerStep#6sk-…`).
_B = r"(?<![A-Za-z])"
# Formats whose prefix says what they are; lengths are the issuers' (or a safe lower bound).
# These are taken wherever they appear, also glued to a word (`gemm_kernelghp_…`, `opAKIA…`):
# their prefixes followed by that many characters do not occur in names.
_DISTINCT_FORMATS = [
    r"hf_[A-Za-z0-9]{20,}",  # Hugging Face
    r"api_org_[A-Za-z0-9]{20,}",  # Hugging Face organisation
    r"(?:AKIA|ASIA|ABIA|AGPA|AIDA|AIPA|ANPA|ANVA|AROA|APKA)[A-Z0-9]{12,}",  # AWS key ids
    # ... and the one prefix that is hex itself: not where the id would be all hex (0–9, A–F), as
    # in an upper-case hash inside a kernel name (213 of 20,200 wide names lost their tail). AWS
    # writes an id's 16 characters in base32 (A–Z, 2–7): all of them within A–F and 2–7 once in ~10^7.
    r"ACCA(?=[0-9A-F]*[G-Z])[A-Z0-9]{12,}",
    r"gh[pousr]_[A-Za-z0-9]{20,}",  # GitHub
    r"github_pat_[A-Za-z0-9_]{20,}",
    r"glpat-[A-Za-z0-9_\-]{16,}",  # GitLab
    # GitLab's other prefixes (its token overview's table: OAuth secret, deploy, runner, CI/CD
    # job, trigger, feed, incoming mail, agent, SCIM, feature flags client), its runner
    # registration token and session cookie
    r"gl(?:oas|dt|rt|cbt|ptt|ft|imt|agent|soat|ffct)-[A-Za-z0-9_\-]{20,}",
    r"GR1348941[A-Za-z0-9_\-]{20,}",
    r"_gitlab_session=[0-9a-z]{32}",
    r"sk-(?:proj|ant|svcacct|admin)-[A-Za-z0-9_\-]{16,}",  # OpenAI's and Anthropic's own prefixes
    r"AIza[0-9A-Za-z_\-]{30,}",  # Google API key
    r"ya29\.[0-9A-Za-z_\-]{20,}",  # Google OAuth access token
    r"pypi-[A-Za-z0-9_\-]{50,}",  # PyPI
    r"dapi[0-9a-f]{32}",  # Databricks
    r"wandb_v1_[A-Za-z0-9_]{20,}",
    r"eyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}",  # JSON Web Token
    r"xapp-[0-9]-[A-Za-z0-9]{8,}-[0-9]{8,}-[A-Za-z0-9]{20,}",  # Slack app-level token
    # webhook URLs: the path after the host is the secret (Slack: T…/B…/24 characters; Discord:
    # the hook's id and its 68-character token)
    r"hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9_+/\-]{20,}",
    r"discord(?:app)?\.com/api(?:/v[0-9]+)?/webhooks/[0-9]{17,20}/[A-Za-z0-9_\-]{30,}",
    r"gsk_[A-Za-z0-9]{40,}",  # Groq (52)
    r"hv[sbr]\.[A-Za-z0-9_\-]{24,}",  # HashiCorp Vault service, batch and recovery tokens
    r"dckr_(?:pat|oat)_[A-Za-z0-9_\-]{20,}",  # Docker Hub personal and organisation tokens (27)
    r"SG\.[A-Za-z0-9_\-]{22}\.[A-Za-z0-9_\-]{43}",  # SendGrid: two base64url parts
    r"shp(?:at|ss|ca|pa)_[a-fA-F0-9]{32}",  # Shopify access tokens and shared secret
    # Telegram bot token: the bot's id, then 35 characters (34 in its documentation's example)
    # that begin with AA
    r"[0-9]{5,16}:AA[A-Za-z0-9_\-]{30,}",
]
_WORD_FORMATS = [
    r"sk-[A-Za-z0-9_\-]{16,}",  # OpenAI, DeepSeek, …
    r"(?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9]{16,}",  # Stripe
    r"xox[abeprs]-[A-Za-z0-9\-]{10,}",  # Slack
    r"npm_[A-Za-z0-9]{30,}",  # npm
    r"r8_[A-Za-z0-9]{37}",  # Replicate (`r8_` ends words: `…_tr8_…`)
]
_FORMATS = [*_DISTINCT_FORMATS, *_WORD_FORMATS]
# Keys whose value is a secret, in `key=value`, `key: value`, `"key": "value"` and `--key value`
# (any case; also the tail of a longer name: `db_password=`). `token` alone is often a count
# (`token: 5`): only `token=` and a quoted `"token":` are taken for one (and `token` alone is no
# needle: names such as `…_expert_tokens_kernel` are common, and the expression costs ~1 µs a character).
_SECRET_KEYS = (
    *("password", "passwd", "pwd", "secret", "secret_key", "client_secret", "private_key"),
    *("api_key", "apikey", "api-key", "access_key", "access_token", "auth_token", "refresh_token"),
    # HTTP headers (`x-auth-token:`, `X-Access-Token:`, GitLab's `PRIVATE-TOKEN:`)
    *("auth-token", "access-token", "private-token"),
    # Azure connection strings (`AccountKey=…;`, Service Bus' `SharedAccessKey=`), `az --account-key`
    *("accountkey", "account_key", "account-key", "sharedaccesskey", "sharedaccesssignature"),
    # signed URLs' query parameters (S3's `X-Amz-Signature=`, `X-Amz-Security-Token=`, GCS')
    *("amz-signature", "security-token", "goog-signature"),
)
# An environment variable's name ending in one of these (`DB_PASS=`, `HF_TOKEN: `, `"SMTP_PW": `):
# upper case only, the whole name, and right before its separator — in lower case they end
# ordinary names (`post_grad_pass`, `compute_cache_key`, `…_token_ids_kernel`, `conv_pw`).
_ENV_SECRETS = ("PASS", "PASSPHRASE", "PW", "TOKEN", "KEY")
_ENV_KEY = r"(?<![A-Za-z0-9_])[A-Z][A-Z0-9_]*_(?:" + "|".join(_ENV_SECRETS) + r")(?=[\"']?[ ]?[:=])"
_KEY = r"[\"']?(?:(?i:" + "|".join(re.escape(key) for key in _SECRET_KEYS) + r")|" + _ENV_KEY + r")[\"']?"
_TOKEN_KEY = r"(?i:token ?=|[\"']token[\"']\s*[:=])"
_SEPARATOR = r"\s*[:=]\s*"
# a URL's userinfo (`user:pass`): the user may be empty (redis://:pw@), the password hold / + @
# and ' (o'neil:it's@); it ends at whitespace or a double quote; `s3:/` is a URL whose // a
# path collapsed
_USERINFO = r"(?:(?<=://)|(?<=:/))[^/\s:@\"]*:[^\s\"]*"
# ... and a userinfo without a scheme (`user:password@host`: a DSN, a file named
# `run_user:s3cretpass@host.json` — a file name holds no `/`, so never a URL's `://`). Narrower than
# a URL's, as nothing says it is one: the user begins a word (or a path's file name) with a letter
# (not `a::b`, `12:30@…`, nor a scheme such as `mailto:`), the password holds 4 or more characters and no
# white space, `:`, `/`, quote or bracket (not `file.py(10): fn`, `a:b@c`), and the host is a
# host name, with a port or not, that ends there (not `image:tag@sha256:…`, whose digest follows
# its `:`; a `.` or `:` before a space ends a sentence or a message's subject: `…@host.json: 11
# values`). The user may hold what an earlier pass took for a token (`run_<redacted>_user`): a
# message naming such a file is redacted as one text again, and had kept the password behind it.
_HOST_NAME = r"[A-Za-z0-9][A-Za-z0-9_\-]*(?:\.[A-Za-z0-9_\-]+)*(?::[0-9]{1,5})?(?![A-Za-z0-9_\-@]|[.:][A-Za-z0-9])"
_USER_PART = r"(?:[A-Za-z0-9_.%+\-]|" + re.escape(REDACTED) + ")"
_BARE_USERINFO = (
    r"(?<![A-Za-z0-9_.%+\-:@\\])(?!(?i:mailto|sips?|xmpp|tel|im|pres|urn|data):)"
    r"(?:[A-Za-z]|" + re.escape(REDACTED) + ")" + _USER_PART + r"*"
    r":[^\s:/\\\"'`<>()\[\]{},;]{4,}(?=@" + _HOST_NAME + ")"
)
# Each alternative is redacted whole, except what a `keep*` group matched (a key and its
# separator: `password=<redacted>`, `"password": "<redacted>"`). The userinfos come first: at the
# position after `://` (or where a bare one begins) they must win over a token format its user
# name may match (`s3://AKIA…:pw@bucket` lost only the key id, and a second pass the password).
_PATTERNS = [
    # userinfo followed by @host (up to the token's last @); the host ends at a quote too
    _USERINFO + r"(?=@[^\s@\"']*(?:[\s\"']|$))",
    _BARE_USERINFO,
    "(?:" + "|".join(_DISTINCT_FORMATS) + ")",
    _B + "(?:" + "|".join(_WORD_FORMATS) + ")",
    # an HTTP Authorization value (also after a _, or URL-encoded)
    _B + r"(?i:bearer(?:\s+|%20|\+))[A-Za-z0-9._~+/=\-]{8,}",
    r"(?P<keep_auth>(?<![A-Za-z0-9])[\"']?(?i:(?:proxy-)?authorization)[\"']?" + _SEPARATOR + r"[\"']?"
    r"(?:(?i:basic|bearer|token|digest)\s+)?)[^\s&,;'\"]+",
    # PEM keys (`-----BEGIN RSA PRIVATE KEY-----`) and PGP's (`… PRIVATE KEY BLOCK-----`)
    r"-----BEGIN [A-Z ]*PRIVATE KEY(?: BLOCK)?-----(?:.*?-----END [A-Z ]*PRIVATE KEY(?: BLOCK)?-----|.*)",
    # an Azure SAS signature, only as a URL's query parameter (`?sv=…&sig=…`): `sig` alone is a
    # common name
    r"(?P<keep_sig>(?<=[?&])sig=)[^\s&#'\"]+",
    # a quoted value: its text up to the closing quote (spaces and all)
    r"(?P<keep_quoted>(?:" + _KEY + _SEPARATOR + "|" + _TOKEN_KEY + r"\s*)(?P<quote>[\"']))"
    r"(?:\\.|(?!(?P=quote))[^\\\r\n]){1,4096}(?=(?P=quote))",
    r"(?P<keep_plain>(?:" + _KEY + _SEPARATOR + "|" + _TOKEN_KEY + r"\s*))[^\s&,;'\"]+",
    r"(?P<keep_flag>--(?i:" + "|".join(re.escape(key) for key in _SECRET_KEYS) + r")\s+)[^\s'\"-][^\s'\"]*",
]
CREDENTIAL = re.compile("|".join(f"(?:{p})" for p in _PATTERNS), re.DOTALL)
_KEEP = ("keep_auth", "keep_sig", "keep_quoted", "keep_plain", "keep_flag")
# Text every match of a pattern above contains, lower-cased (a format's prefix, `bearer`, a key's
# name, a URL's `:/`, a bare userinfo's `@`). Searching CREDENTIAL costs ~400 ns a character (lookbehinds in every
# alternative); ASCII text without any of these cannot match it and is passed over for ~1/10 of
# that. Text beyond ASCII always goes to the expression (its case-insensitive parts match
# letters such as `ſ` that lower-casing keeps).
_NEEDLES = (
    *("hf_", "api_org_", "akia", "asia", "abia", "acca", "agpa", "aida", "aipa", "anpa", "anva", "aroa", "apka"),
    *("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_", "glpat-", "sk-", "sk_", "rk_", "pk_", "xox"),
    *("aiza", "ya29.", "npm_", "pypi-", "dapi", "wandb_v1_", "eyj", "bearer", "-----begin ", ":/", "@"),
    *("authorization", "token=", "token =", 'token"', "token'", *_SECRET_KEYS),
    *("gloas-", "gldt-", "glrt-", "glcbt-", "glptt-", "glft-", "glimt-", "glagent-", "glsoat-", "glffct-"),
    *("gr1348941", "gitlab_session=", "xapp-", "hooks.slack.com/", "webhooks/", "gsk_", "hvs.", "hvb.", "hvr."),
    *("dckr_pat_", "dckr_oat_", "sg.", "shpat_", "shpss_", "shpca_", "shppa_", "r8_", "sig=", ":aa"),
    # an environment variable's key as `_ENV_KEY` takes it: right before its separator
    *(f"{name.lower()}{tail}" for name in _ENV_SECRETS for tail in ("=", ":", '"', "'", " =", " :")),
)
# (A needle begins with a letter, `-`, `:` or `@` — not `_`, `/`, `&` or a digit, which fill kernel
# names and paths: the scan tries its branches at every character that begins a needle, and those
# doubled its time.)


# the needles in one pass over a text (~2× faster than searching for each in turn)
_NEEDLE_SCAN = re.compile(trie_pattern(sorted(_NEEDLES)))
# ... and in JSON text, where a quote inside a string is written `\"` (`{\"token\": …}` in a string)
_JSON_NEEDLE_SCAN = re.compile(trie_pattern(sorted({*_NEEDLES, *(needle.replace('"', '\\"') for needle in _NEEDLES)})))


# the letters beyond ASCII that the expression's case-insensitive parts take for ASCII ones
# (Python's re documentation: İ, ı, ſ and the Kelvin sign), as those ASCII letters
_RE_FOLDS = str.maketrans({"\u0130": "i", "\u0131": "i", "\u017f": "s", "\u212a": "k"})


@lru_cache(maxsize=1 << 14)  # each output written screens the run's texts again (19 times a run)
def _may_hold_credential(text: str) -> bool:
    """Whether `text` holds a needle: every match of CREDENTIAL holds one as its case-insensitive
    parts read text (`_RE_FOLDS`, lower case), and every credential `_hidden_credential` finds
    holds one once the text is NFKC-folded and its hiding characters are gone. A text without
    needles is passed over: a cut name ends with `…` and was searched whole (~400 ns a
    character; 50 dotted module names of 16k characters in every stack took 19 s)."""
    if text.isascii() and text.isprintable():
        return _NEEDLE_SCAN.search(text.lower()) is not None
    if _NEEDLE_SCAN.search(text.translate(_RE_FOLDS).lower()) is not None:
        return True
    shown = unicodedata.normalize("NFKC", text).translate(_INVISIBLE)
    return _NEEDLE_SCAN.search(shown.translate(_RE_FOLDS).lower()) is not None


# Characters that hide a credential from the expression without changing what it reads as: control
# and format characters (NUL, zero-width spaces, bidi marks) deleted; compatibility forms
# (full-width `ｇｈｐ_`, ligatures) folded by NFKC.
# (Unicode's Cc and Cf categories as Python 3.11's unicodedata has them, as ranges: walking every
# code point took 0.6 s at import)
_HIDING = (
    *((0x00, 0x1F), (0x7F, 0x9F), (0xAD, 0xAD), (0x600, 0x605), (0x61C, 0x61C), (0x6DD, 0x6DD), (0x70F, 0x70F)),
    *((0x890, 0x891), (0x8E2, 0x8E2), (0x180E, 0x180E), (0x200B, 0x200F), (0x202A, 0x202E), (0x2060, 0x2064)),
    *((0x2066, 0x206F), (0xFEFF, 0xFEFF), (0xFFF9, 0xFFFB), (0x110BD, 0x110BD), (0x110CD, 0x110CD)),
    *((0x13430, 0x13438), (0x1BCA0, 0x1BCA3), (0x1D173, 0x1D17A), (0xE0001, 0xE0001), (0xE0020, 0xE007F)),
)
# ... but for those the expression reads as white space (`\s`: tab, newline, \x1c–\x1f, \x85), which separate
_INVISIBLE = dict.fromkeys(
    code for low, high in _HIDING for code in range(low, high + 1) if not re.match(r"\s", chr(code))
)


# a run of characters between two word characters that holds no white space (`pa\0ss`)
_INSIDE_WORD = re.compile(r"(?<=\w)[^\w\s]+(?=\w)")


def _hidden_credential(text: str) -> bool:
    """Whether `text` as it reads holds a credential the expression does not see in it: folded by
    NFKC, with its hiding characters (`_INVISIBLE`) gone — all of them, or only those inside a
    word (a key hidden by a NUL, `pa\\0ssword`, before a value that is itself invisible: gone
    with the rest, `password: ` is no credential, but `password: \\x08` is one)."""
    if text.isascii() and text.isprintable():
        return False
    folded = unicodedata.normalize("NFKC", text)
    shown = folded.translate(_INVISIBLE)
    if shown != text and CREDENTIAL.search(shown):
        return True
    inside = _INSIDE_WORD.sub(lambda run: run.group().translate(_INVISIBLE), folded)
    return inside != text and CREDENTIAL.search(inside) is not None


def holds_credential(text: str) -> bool:
    """Whether `text` holds a credential-shaped part, also one hidden by characters that do not
    show (`_hidden_credential`)."""
    if not _may_hold_credential(text):
        return False
    return CREDENTIAL.search(text) is not None or _hidden_credential(text)


def json_holds_credential(compact: str) -> bool:
    """Whether a string of JSON text written with `ensure_ascii` (json's default) holds a
    credential: exactly what `redact_document` would change, decided from the text without
    walking the document. Only the string literals that can hold one are decoded and searched:
    those a needle lands in and those with a `\\u` escape (text beyond ASCII or control
    characters). A needle holds no backslash or control character, and a quote in it is looked
    for escaped too (`token\\"`), so a string holding one shows it in the text; outside strings
    (numbers, `true`, punctuation) no needle occurs. Keys are strings like any other (redacted too)."""
    hits = [hit.start() for hit in _JSON_NEEDLE_SCAN.finditer(compact.lower())]  # ASCII: offsets kept
    if "\\u" in compact:
        hits = sorted(hits + [hit.start() for hit in _ESCAPE.finditer(compact)])
    covered = -1  # end of the last literal decoded: a hit before it lies in that literal
    for position in hits:
        if position < covered:
            continue
        opening = _opening_quote(compact, position)
        literal = _STRING_LITERAL.match(compact, opening) if opening >= 0 else None
        if literal is None or literal.end() <= position:  # not text json.dumps wrote: walk it
            return True
        covered = literal.end()
        if holds_credential(json.loads(literal.group())):
            return True
    return False


_ESCAPE = re.compile(r"\\u")
_STRING_LITERAL = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')  # unrolled: no alternation a character


def _opening_quote(text: str, position: int) -> int:
    """The quote that opens the string literal holding `position`: the last quote before it
    that no backslash escapes (an odd run of backslashes before a quote escapes it)."""
    quote = text.rfind('"', 0, position)
    while quote > 0:
        before = quote - 1
        while before >= 0 and text[before] == "\\":
            before -= 1
        if (quote - 1 - before) % 2 == 0:
            return quote
        quote = text.rfind('"', 0, quote)
    return quote


def redact_text(text: str) -> str:
    """`text` with every credential-shaped part replaced by `<redacted>`."""
    if not _may_hold_credential(text):
        return text
    if CREDENTIAL.search(text):
        text = CREDENTIAL.sub(_redacted, text)
    # a credential that only shows once hiding characters are gone (`ghp_\0…`, `ｇｈｐ_…`): where
    # it lies in `text` is not known, so all of it goes
    return REDACTED if _hidden_credential(text) else text


def redact_message(subject: str | None, problem: str) -> str:
    """A message of ours about something from outside, `SUBJECT: PROBLEM`, with the subject (a
    path, a run's name, a trace's text) and the problem redacted apart, then joined: redacted as
    one text, a subject ending in a key (`/etc/passwd`, a run named `secret` or `my_api_key`) took
    the problem's first word for its value — `secret: <redacted> a run folder` read as the
    opposite of `secret: not a run folder`."""
    said = redact_text(problem)
    return f"{redact_text(subject)}: {said}" if subject else said


def _redacted(match: re.Match[str]) -> str:
    """A match's replacement: `<redacted>`, after the key it keeps (see `_PATTERNS`)."""
    groups = match.groupdict()
    return next((groups[name] for name in _KEEP if groups[name] is not None), "") + REDACTED


# characters past a cut that `redact_cut` reads: a credential the cut would end is seen whole
CUT_TAIL = 4096
# a URL's userinfo (`user:pass`) running to the end of a text: whether an `@` follows is not known
_OPEN_USERINFO = re.compile(_USERINFO + r"\Z")


def redact_cut(text: str, keep: int) -> str:
    """The first `keep` characters of `text` with its credentials redacted, including one the cut
    would end — cut first, `ghp_…` keeps a token's first characters, and `https://user:pass`
    before a cut `@host` no longer looks like a credential at all. The text up to CUT_TAIL
    characters past the cut is redacted, then cut; where the text goes on past that and a URL's
    userinfo runs through it, the userinfo is redacted from its start (its `@` may lie beyond)."""
    window = redact_text(text[: keep + CUT_TAIL])
    if len(text) > keep + CUT_TAIL:
        running = _OPEN_USERINFO.search(window)
        if running is not None and running.start() < keep:
            window = window[: running.start()] + REDACTED
    return window[:keep]


def redact_value(value: Any) -> Any:
    """Strings redacted anywhere inside a JSON-like value (dicts' keys and values, lists); other
    values as they are."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, dict):
        return {redact_value(key): redact_value(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact_value(item) for item in value]
    return value


def redact_document(document: Any) -> Any:
    """`redact_value` of a whole document (an output's JSON), screened in one pass: its strings
    are joined into one lower-cased text and the needles searched for in it at once; only the
    strings a needle lands in (and those beyond ASCII) are redacted one by one. The document
    itself when nothing in it changes, else a copy with the credential-shaped strings (keys
    too) redacted. Output JSON walks a document only when its text holds a credential
    (`json_holds_credential`). The catalog of a trace with 200k kernel names holds ~10^6
    strings: screening them one by one took seconds."""
    changed = {}
    for text in _suspects(list(strings_in(document))):
        new = redact_text(text)
        if new != text:
            changed[text] = new
    return _replaced(document, changed) if changed else document


def credential_count(strings: list[str]) -> int:
    """How many of `strings` hold a credential-shaped part (screened together, then checked)."""
    return sum(redact_text(text) != text for text in _suspects(strings))


def _suspects(strings: list[str]) -> set[str]:
    """The strings that may hold a credential: beyond ASCII or not printable (`redact_text` looks
    at each with `_may_hold_credential`), or holding a needle."""
    plain = all(map(str.isascii, strings)) and all(map(str.isprintable, strings))
    suspects = set() if plain else {text for text in strings if not (text.isascii() and text.isprintable())}
    screened = [text for text in strings if text not in suspects] if suspects else strings
    if not screened:
        return suspects
    lowered = "\0".join(screened).lower()  # ASCII: lower-casing keeps every offset; no needle holds a NUL
    lengths = np.fromiter(map(len, screened), np.int64, len(screened)) + 1
    starts = np.cumsum(lengths) - lengths
    # a needle never spans two strings (none holds a NUL): one hit per string holding any is enough
    found = [hit.start() for hit in _NEEDLE_SCAN.finditer(lowered)]
    if found:
        rows = np.unique(np.searchsorted(starts, np.asarray(found, np.int64), side="right") - 1)
        suspects.update(screened[row] for row in rows.tolist())
    return suspects


def _replaced(value: Any, changed: dict[str, str]) -> Any:
    if isinstance(value, str):
        return changed.get(value, value)
    if isinstance(value, dict):
        return {_replaced(key, changed): _replaced(item, changed) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_replaced(item, changed) for item in value]
    return value


def redact_frame(frame: pd.DataFrame) -> int:
    """Redact the string columns of `frame` in place (categoricals: only their distinct values);
    returns how many distinct values were redacted."""
    import pandas as pd

    redacted = 0
    for column in frame.columns:
        series = frame[column]
        if isinstance(series.dtype, pd.CategoricalDtype):
            categories = series.cat.categories
            if not (pd.api.types.is_object_dtype(categories) or pd.api.types.is_string_dtype(categories)):
                continue
            texts = [c for c in categories if isinstance(c, str)]
            suspects = _suspects(texts)  # screened together: a column of 200k kernel names
            if not suspects:
                continue
            new = [redact_text(c) if isinstance(c, str) and c in suspects else c for c in categories]
            changed = sum(isinstance(a, str) and a != b for a, b in zip(new, categories, strict=True))
            if not changed:
                continue
            redacted += changed
            new_codes, uniques = pd.factorize(np.asarray(new, dtype=object))
            codes = series.cat.codes.to_numpy()
            remapped = np.where(codes >= 0, new_codes[np.maximum(codes, 0)], -1)
            frame[column] = pd.Categorical.from_codes(remapped, categories=pd.Index(uniques, dtype=object))
        elif pd.api.types.is_object_dtype(series) or pd.api.types.is_string_dtype(series):
            redacted += _redact_texts(frame, column)
    return redacted


def _redact_texts(frame: pd.DataFrame, column: str) -> int:
    """A column of texts redacted in place, each distinct text checked once (a column repeating
    one value, the trace's name on every memory event, is one check, not one per row); returns
    how many rows changed."""
    import pandas as pd

    series = frame[column]
    values = series.to_numpy()
    try:
        codes, uniques = pd.factorize(values)
    except TypeError:  # unhashable values (lists): row by row
        codes, uniques = np.arange(len(values)), values
    new = [redact_text(u) if isinstance(u, str) else u for u in uniques]
    changed = np.fromiter((isinstance(a, str) and a != b for a, b in zip(new, uniques, strict=True)), bool, len(new))
    present = codes >= 0  # missing values (None, NaN) stay as they are
    rows = int(changed[codes[present]].sum())
    if rows:
        lookup = np.empty(len(new), dtype=object)
        for i, value in enumerate(new):  # one by one: a list value must stay one element
            lookup[i] = value
        out = values.astype(object, copy=True)
        out[present] = lookup[codes[present]]
        frame[column] = pd.Series(out, index=series.index, dtype=object)
    return rows


def redacted_error(exc: AtlasError) -> str:
    """An AtlasError's one line with credentials redacted, its source and its problem apart
    (`redact_message`): `/etc/passwd: not JSON` keeps its `not`."""
    return redact_message(exc.source, exc.problem)
