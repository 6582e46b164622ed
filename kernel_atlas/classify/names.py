"""Kernel-name normalisation: the parts of a GPU kernel name that identify its family, and
token-aware name patterns.

void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, ...>(int, ...)
    base   → at::native::vectorized_elementwise_kernel
_ZN5aiter24add_rmsnorm_quant_kernelIDF16bDF16bLi256E...
    base   → aiter::add_rmsnorm_quant_kernel            (Itanium nested-name prefix decoded)
triton_poi_fused_clamp_sub_0 / fused_ge_lt___and____2266955281149801844
    family → triton_poi_fused_clamp_sub_# / fused_ge_lt___and__#
"""

from __future__ import annotations

import re
from functools import lru_cache

try:  # the regular-expression parser, used only to find a pattern's leading literals
    from re import _constants as _sre
    from re import _parser as _sre_parse
except ImportError:  # pragma: no cover - Python 3.10
    import sre_constants as _sre  # type: ignore[no-redef]
    import sre_parse as _sre_parse  # type: ignore[no-redef]

_ANON = "(anonymous namespace)"
_DIGITS = re.compile(r"\d+")
_ANGLE = re.compile(r"[<>]")
_HEX = "0123456789abcdef"


def _itanium_prefix(mangled: str) -> str | None:
    """Decode the qualified name of an Itanium-mangled symbol, ignoring templates and args."""
    pos = 2
    nested = mangled.startswith("_ZN")
    if nested:
        pos = 3
        while pos < len(mangled) and mangled[pos] in "rVK":  # cv-qualifiers of member functions
            pos += 1
    parts: list[str] = []
    while pos < len(mangled) and mangled[pos].isdigit():
        end = pos
        while end < len(mangled) and mangled[end].isdigit():
            end += 1
        length = int(mangled[pos:end])
        parts.append(mangled[end : end + length])
        pos = end + length
        if not nested:
            break
        # a template argument list ("I…E") ends the part we can name without a full demangler
        if pos < len(mangled) and mangled[pos] in "IE":
            break
    return "::".join(parts) if parts else None


def _strip_templates(text: str) -> str:
    """`text` without its template arguments: what lies inside `<…>` (nested) and the angle
    brackets themselves; an unmatched `>` is dropped, an unclosed `<` drops the rest. Only the
    brackets are visited, not every character."""
    if "<" not in text and ">" not in text:
        return text
    out = []
    depth = last = 0
    for bracket in _ANGLE.finditer(text):
        at = bracket.start()
        if depth == 0:
            out.append(text[last:at])
        depth = depth + 1 if text[at] == "<" else max(depth - 1, 0)
        last = at + 1
    if depth == 0:
        out.append(text[last:])
    return "".join(out)


@lru_cache(maxsize=65536)
def base_name(name: str) -> str:
    """Qualified function name without return type, template arguments or parameters."""
    text = name.strip()
    if text.startswith(("Memcpy ", "Memset ")):  # Kineto's names for GPU copies and sets
        return text
    if text.startswith("_Z"):
        decoded = _itanium_prefix(text)
        if decoded:
            return decoded
    text = text.replace(_ANON, "anon").replace("operator()", "operator")
    text = _strip_templates(text)
    text = text.split("(", 1)[0].strip()
    return text.rsplit(" ", 1)[-1] if " " in text else text


@lru_cache(maxsize=65536)
def family_key(name: str) -> str:
    """Base name with generated suffixes (Triton signatures and indices, Inductor hashes) and
    digits collapsed."""
    return _DIGITS.sub("#", _without_hash_suffix(without_triton_signature(base_name(name))))


def _is_triton_signature(text: str) -> bool:
    """Whether `text` is the argument signature Triton 2.0/2.1 appended to a kernel's name: each
    argument's index, counting from 0, followed by `c` (equal to 1), `d` (divisible by 16) or `e`
    (divisible by 8) as it was specialised (`0d1d2de`). One letter at least: a run of indices
    alone (`_0`, `_12`) is an Inductor kernel index or a node's number."""
    at = index = 0
    lettered = False
    while at < len(text):
        digits = str(index)
        if not text.startswith(digits, at):
            return False
        at += len(digits)
        while at < len(text) and text[at] in "cde":
            at += 1
            lettered = True
        index += 1
    return lettered


def without_triton_signature(name: str) -> str:
    r"""An Inductor kernel's name without the argument signature Triton 2.0/2.1 appended to it:
    `triton_poi_fused_relu_0_0d1d2de` → `triton_poi_fused_relu_0`, the name later Tritons (and
    Inductor's own CPU op around the launch) give the same kernel, so that name rules anchored on
    Inductor's index (`_\d+$`) read both spellings alike. Only a signature after an Inductor index
    is cut: `triton__0d1d2de` (PyTorch 2.0's `triton_` kernel, whose index is its signature) and
    every other name are returned as they are."""
    if not name.startswith("triton_"):
        return name
    head, _, signature = name.rpartition("_")
    index = head.rpartition("_")[2]
    if not (index.isascii() and index.isdigit()) or not _is_triton_signature(signature):
        return name
    return head


def _without_hash_suffix(base: str) -> str:
    """`base` with a generated suffix — underscores then 12 or more lower-case hex digits, or one
    underscore then digits, at its end (before a final newline) — as `_#`. String operations, not
    a regular expression: `_+[0-9a-f]{12,}$` backtracked over a run of underscores (a 16,000-`_`
    kernel name took 2 s, and a trace of 60 such names more than 90 s)."""
    newline = "\n" if base.endswith("\n") else ""
    text = base[: len(base) - len(newline)]
    head = text.rstrip(_HEX)
    tail = text[len(head) :]
    if not head.endswith("_"):
        return base
    if len(tail) >= 12:
        return head.rstrip("_") + "_#" + newline
    if tail and tail.isdigit():
        return head + "#" + newline
    return base


# A token boundary inside a kernel name: the start or end, a separator (anything not a letter or
# digit), a camelCase step (`topkGating`, `RMSNorm`) or a letter/digit step (`s16816gemm`,
# `fp8e4m3`). Case-sensitive on purpose, so it is wrapped in `(?-i:...)` inside patterns that
# are otherwise case-insensitive.
TOKEN_BOUNDARY = (
    r"(?-i:(?<![A-Za-z0-9])|(?![A-Za-z0-9])|(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Za-z])(?=[0-9])"
    r"|(?<=[0-9])(?=[A-Za-z])|(?<=[A-Z])(?=[A-Z][a-z]))"
)
_WORD_BOUNDARY = re.compile(r"(?<!\\)((?:\\\\)*)\\b")


def token_pattern(pattern: str) -> str:
    r"""A name pattern with every `\b` turned into a token boundary: `\bgemm\b` matches
    `xmma_gemm`, `s16816gemm` and `GemmUniversal` but not `fbgemm`; `\bnorm` matches `RMSNorm`."""
    return _WORD_BOUNDARY.sub(lambda m: m.group(1) + TOKEN_BOUNDARY, pattern)


_ZERO_WIDTH = (_sre.AT, _sre.ASSERT, _sre.ASSERT_NOT)


def _prefixes(items: list) -> list[str] | None:
    """Literal texts one of which starts every match of `items` (lower-cased), or None."""
    out = [""]
    for op, av in items:
        if op in _ZERO_WIDTH:
            continue
        if op is _sre.LITERAL:
            out = [p + chr(av).lower() for p in out]
            continue
        branches = None
        if op is _sre.IN and all(o is _sre.LITERAL for o, _ in av) and len(av) <= 8:
            out = [p + chr(v).lower() for p in out for _, v in av]  # a small class: [sdhcz]
            continue
        if op in (_sre.MAX_REPEAT, _sre.MIN_REPEAT) and av[0] == 0 and av[1] == 1:
            branches = [list(av[2]), []]  # an optional part: with it, and without it
        elif op is _sre.SUBPATTERN:
            inner = list(av[-1])
            if all(o in _ZERO_WIDTH for o, _ in inner) or (
                len(inner) == 1
                and inner[0][0] is _sre.BRANCH
                and all(all(o in _ZERO_WIDTH for o, _ in branch) for branch in inner[0][1][1])
            ):
                continue  # a zero-width group (the token boundary)
            branches = [inner]
        elif op is _sre.BRANCH:
            branches = [list(b) for b in av[1]]
        if branches is not None:
            heads = [_prefixes(b) for b in branches]
            if any(h is None for h in heads):
                return out
            out = [p + h for p in out for head in heads for h in head]  # type: ignore[union-attr]
            if op is _sre.MAX_REPEAT or op is _sre.MIN_REPEAT:
                continue  # an optional literal: both spellings go on
        return out
    return out


def literal_needles(parsed: object, shortest: int = 2) -> tuple[str, ...] | None:
    """Lower-cased literals one of which every match of a pattern contains (its alternatives'
    leading literals): a quick `in` test that rules the pattern out for most names. None when
    some alternative does not start with `shortest` literal characters. `parsed` is the pattern
    as `re`'s parser gives it (`parse_pattern`); zero-width parts (`\\b`, token boundaries) are
    skipped, so the pattern before `token_pattern` gives the same literals."""
    try:
        heads = _prefixes(list(parsed))  # type: ignore[call-overload]
    except Exception:  # an internal API: without it, no shortcut
        return None
    if not heads or min(len(h) for h in heads) < shortest:
        return None
    return tuple(sorted(set(heads)))


def parse_pattern(pattern: str, flags: int = 0) -> object:
    """`pattern` as `re`'s parser reads it (raises `re.error` when it is not a regular expression);
    `.state.groupdict` holds its named groups."""
    return _sre_parse.parse(pattern, flags)


NAME_TEXTS = ("function name", "qualified name", "full name")


@lru_cache(maxsize=65536)
def name_texts(name: str) -> tuple[str, str, str]:
    """What name rules search, most specific first: the kernel function's own name, its
    qualified base name (namespaces), then the full name as written (template arguments and
    parameters included). `flashinfer::sampling::OnlineSoftmaxFusedKernel<…>` gives
    `OnlineSoftmaxFusedKernel`, `flashinfer::sampling::OnlineSoftmaxFusedKernel`, and the name.
    The first two drop a Triton 2.0/2.1 argument signature (`without_triton_signature`): the
    rules read `triton_poi_fused_relu_0_0d1d2de` as `triton_poi_fused_relu_0`."""
    base = without_triton_signature(base_name(name))
    return base.rsplit("::", 1)[-1], base, name


@lru_cache(maxsize=65536)
def lower_texts(name: str) -> tuple[str, str, str]:
    return tuple(t.lower() for t in name_texts(name))  # type: ignore[return-value]


# Kernels whose base name says little: their first informative template argument is shown too.
_GENERIC_BASES = ("Kernel", "Kernel2", "device_kernel", "elementwise_kernel", "reduce_kernel", "kernel")


def _template_args(name: str) -> list[str]:
    start = name.find("<")
    if start < 0:
        return []
    args, depth, current = [], 0, []
    for ch in name[start + 1 :]:
        if ch == "<":
            depth += 1
        elif ch == ">":
            if depth == 0:
                break
            depth -= 1
        if ch == "," and depth == 0:
            args.append("".join(current).strip())
            current = []
            continue
        current.append(ch)
    args.append("".join(current).strip())
    return args


# a `<` that opens a template argument list follows a name (`Kernel<`, `Sm80<`); the `>` that
# closes one is followed by what follows a type in a signature, never by a name, a quote or
# markup (`<script>alert`, `</b>`); operators (`operator<<`) and arrows are no brackets
_OPENS_AFTER = re.compile(r"[A-Za-z0-9_]")
_NOT_AFTER_CLOSE = re.compile(r"[A-Za-z0-9_<\"'/=!$]")
_NO_BRACKETS = re.compile(r"operator\s*(?:<<=|>>=|<=>|<<|>>|<=|>=|->\*?|<|>)|->")
_MARKER = "<redacted>"  # what ingest writes for a credential in a name (core.redact.REDACTED): text


def _template_brackets(name: str) -> bool:
    """Whether every `<` and `>` of `name` belongs to a template argument list (`<` after a
    name, its `>` before a signature's punctuation or the end; an unclosed `<` is a name cut
    short), so that stripping them leaves its qualified name; not so for text that only holds
    angle brackets (`fake<script>alert("x")</script>_kernel`, `kernel & <b>bold</b>`)."""
    # `operator()<T>`: a call operator's template arguments follow its parentheses
    text = _NO_BRACKETS.sub("", name.replace(_MARKER, "").replace("operator()", "call"))
    depth = 0
    for bracket in _ANGLE.finditer(text):
        at = bracket.start()
        if text[at] == "<":
            if at == 0 or not _OPENS_AFTER.match(text, at - 1):
                return False
            depth += 1
        elif depth == 0 or _NOT_AFTER_CLOSE.match(text, at + 1):
            return False
        else:
            depth -= 1
    return True


@lru_cache(maxsize=65536)
def display_name(name: str) -> str:
    """A short readable name: the base name, plus the first informative template argument for
    generic launch wrappers (`cutlass::Kernel2<cutlass_80_tensorop_…>`,
    `vectorized_elementwise_kernel<CUDAFunctor_add>`). Only real template argument lists are
    stripped: a name whose angle brackets are text (markup, `<redacted>`) is shown as written
    — taken for templates, `fake<script>alert("x")</script>_kernel<float>(int)` had read
    `fakealert` and `kernel_with_<redacted>` `kernel_with_`."""
    if not _template_brackets(name):
        return name.strip()
    # the marker held as text while the name is taken apart: as a template it cut the name short
    text = name.replace(_MARKER, _HELD)
    return _display_name(text).replace(_HELD, _MARKER)


_HELD = "\x00redacted\x00"  # `<redacted>` while a name is taken apart: no bracket, space or parenthesis


def _display_name(name: str) -> str:
    if "(" not in name and "<" not in name and not name.startswith("_Z"):
        # no signature, no template: its spaces part no return type from a function name
        # (`a/b/c kernel` had read `kernel`, a Python-made name its last word)
        return name.strip()
    base = base_name(name)
    if not base.strip():  # a name of template arguments or a parenthesis only: shown whole, not blank
        return name
    if not base.rsplit("::", 1)[-1].endswith(_GENERIC_BASES):
        return base
    for arg in _template_args(name.replace(_ANON, "anon")):
        if arg and not arg.lstrip("-").isdigit():
            inner = base_name(arg) if "(" in arg or "<" in arg else arg
            return f"{base}<{inner.rsplit('::', 1)[-1]}>"
    return base
