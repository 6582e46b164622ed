"""Hostile-input fuzzing: real traces mutated by hypothesis, run through `atlas ingest` and
`atlas report`, and the bad-input contract checked on every outcome.

The contract (docs/input.md): exit 0 with a correct result, or exit 2 with exactly one
line naming the file and the problem — never a traceback, an "internal error", a hang, memory
beyond a bound, or an output that is not one consistent run.

- `Case`: one mutated trace — which real trace, how it was changed, the bytes.
- `cases()`: the hypothesis strategy. Structural mutations change one event's args value (or
  delete a key, or write it twice), an event's own fields, or the metadata, with hostile
  values (integers beyond int64, 1e999, NaN, lone surrogates, nesting thousands deep, odd
  unicode, credential-shaped strings); byte mutations truncate, flip, delete, duplicate or
  insert bytes, also inside a gzip or zstd stream.
- `Runner`: a worker process, its memory capped with `resource.setrlimit`, that runs the
  commands in-process (no interpreter start per case); a case that overruns its time is killed.
- `check(case, outcome)`: the contract, and for a mutation confined to one value (args, or
  metadata) the oracle "the rest is untouched": exit 0, and every GPU activity the mutation
  could not reach keeps its launch link, shapes, ids and times exactly as ingested unmutated.

Used by tests/cli/test_fuzz.py (a small, derandomized budget in CI) and
benchmarks/fuzz_hostile.py (a long run by hand).
"""

from __future__ import annotations

import copy
import functools
import gzip
import json
import math
import os
import resource
import select
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

REPO = Path(__file__).resolve().parents[2]
TRACES = REPO.parent / "shared" / "traces"
EXAMPLE = REPO / "examples" / "h100_bert_small_infer.json.gz"
# Small real traces (every one fuzzes in well under a second); the example trace ships with the
# repository, so the fuzz test runs without the shared traces too.
SMALL = [
    "a100_alexnet_train",
    "mi250_minitoy_train",
    "a100_triton_compile_tiny",
    "mi300x_torch_compile_llama_block",
    "mi210_gpu_only",
    "mi300x_sglang_qwen3_8b_decode_graph",
    "cpu_only",
]
MEMORY_LIMIT = 6 << 30  # address space of the worker (a plain ingest + report peaks ~3 GB of it, ~0.3 GB resident)
TIME_LIMIT_S = 120.0  # per case (ingest and report), under load

GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
RUNTIME_CATS = ("cuda_runtime", "cuda_driver")
COMPARED = ["name", "ts_us", "dur_us", "launcher", "input_dims", "input_types", "correlation", "external_id",
            "device", "stream", "grid", "block"]  # fmt: skip
KNOWN_ARGS = ["correlation", "External id", "device", "stream", "grid", "block", "bytes", "Input Dims", "Input type",
              "Input Strides", "Concrete Inputs", "Collective name", "In msg nelems", "Out msg nelems",
              "Group size", "dtype", "Process Group Name", "Process Group Ranks", "Seq", "kernel"]  # fmt: skip
EVENT_FIELDS = ["ts", "dur", "pid", "tid", "name", "cat", "ph", "args"]
DEEP = "[" * 3000 + "]" * 3000


def trace_paths() -> list[Path]:
    """The traces fuzzed: the small shared ones present, and the example."""
    return [p for p in (TRACES / f"{s}.json.gz" for s in SMALL) if p.exists()] + [EXAMPLE]


@functools.cache
def parsed(path: Path) -> dict[str, Any]:
    doc = json.loads(gzip.decompress(path.read_bytes()))
    return doc if isinstance(doc, dict) else {"traceEvents": doc}


class Raw:
    """A value written as raw JSON text: numbers JSON libraries refuse (1e999, 2^70 is fine),
    NaN, lone surrogate escapes, nesting deeper than any decoder goes."""

    def __init__(self, text: str, label: str):
        self.text, self.label = text, label

    def __repr__(self) -> str:
        return f"Raw({self.label})"


HOSTILE_RAW = [
    Raw("1e999", "1e999"),
    Raw("-1e999", "-1e999"),
    Raw("NaN", "NaN"),
    Raw("Infinity", "Infinity"),
    Raw(DEEP, "deep list"),
    Raw('{"a":' * 3000 + "1" + "}" * 3000, "deep object"),
    Raw('"ab\\ud800cd"', "lone surrogate"),
    Raw('"\\udc80"', "lone low surrogate"),
    Raw("[1e999, 1, 1]", "list with 1e999"),
    Raw(str(2**64), "2^64"),
    Raw(str(-(2**63) - 1), "-2^63-1"),
    Raw("123456789012345678901234567890e-5", "long mantissa"),
    Raw("9" * 5000, "5,000 digits"),  # Python reads no integer past 4,300 digits
    Raw("[" + "9" * 5000 + ", 1, 1]", "list with 5,000 digits"),
]
SECRETS = ["hf_" + "A1b2" * 9, "Bearer abc.def.ghijkl", "AKIA" + "ABCDEFGHIJKLMNOP", "ghp_" + "Zz09" * 9]
# URLs with passwords (issue 27): an empty user, / + and @ in the password; the password must not leak
URL_SECRETS = {"redis://:hunter2pw@cache:6379/0": "hunter2pw", "https://user:pa/ss+word@example.com/x": "pa/ss+word",
               "pg://bob:s3cr@tpw@db:5432/app": "s3cr@tpw", "https://o'neil:it's2pw@host x": "it's2pw",
               # stop 48: a token as the user name; keys spaced, quoted (JSON) and as flags
               "s3://AKIAZ7HOSTILE48XYQWE:S3cretPw48x@bucket/x": "S3cretPw48x",
               '{"password": "JsonPw48 x"}': "JsonPw48", "password = SpacedPw48": "SpacedPw48",
               "--api-key FlagKey48": "FlagKey48"}  # fmt: skip
# credentials that the cut of a long name (16,384 characters) would end: the part kept must not leak
CUT_SECRETS = {"k" * 16_359 + " https://user:cutpw12345@host.org tail": "cutpw12345",
               "k" * 16_359 + " ghp_" + "Q" * 36 + " tail": "ghp_QQQQQQQQ"}  # fmt: skip
# stop 50: credentials glued to a word (their prefixes say what they are): the credential must not leak
GLUED_SECRETS = {"gemm_kernelghp_" + "Y8x7" * 9: "ghp_" + "Y8x7" * 9, "opAKIAQQHOSTILE50XYZW": "AKIAQQHOSTILE50XYZW",
                 "kernelsk-proj-Hostile50Pwabcdefghijkl": "sk-proj-Hostile50Pw"}  # fmt: skip
LEAKS = [*SECRETS, *URL_SECRETS.values(), *CUT_SECRETS.values(), *GLUED_SECRETS.values()]
# digits str.isdigit() takes and int() does not, numbers beyond int64, Inductor tiles of 0
ODD_DIGITS = ["ProfilerStep#\u00b2", "ProfilerStep#" + "9" * 30, "ProfilerStep#\u0663", "XBLOCK=0", "XBLOCK=\u00b2",
              "\u00b2", "9" * 30, "_ZN\u0663\u0663abc"]  # fmt: skip
LONG_TEXT = ["k" * 40_000, "[" + "1, " * 20_000 + "1]", "x" * 3_000_000]  # past ingest's MAX_TEXT
ODD_TEXT = ["", " ", "\u0000", "\u202eevil", "e\u0301", "😀" * 50, "x" * 100_000, "[bold]x[/]", "[/x]", "\n\r\t",
            "-----BEGIN PRIVATE KEY-----", *SECRETS, *URL_SECRETS, *ODD_DIGITS, *LONG_TEXT, *CUT_SECRETS, *GLUED_SECRETS,
            "<!--<script>x"]  # fmt: skip


def hostile_values() -> st.SearchStrategy[Any]:
    return st.one_of(
        st.sampled_from(HOSTILE_RAW),
        st.integers(min_value=-(2**80), max_value=2**80),
        st.sampled_from([2**31 + 5, 2**40, 2**63 - 1, -(2**63), -1, 0]),
        st.floats(allow_nan=False, allow_infinity=False),
        st.sampled_from(ODD_TEXT),
        st.text(max_size=20),
        st.booleans(),
        st.none(),
        st.lists(st.integers(min_value=-(2**70), max_value=2**70), max_size=4),
        st.dictionaries(st.text(max_size=4), st.integers(), max_size=3),
        st.lists(st.lists(st.integers(min_value=-5, max_value=2**62), max_size=3), max_size=3),
    )


@dataclass
class Case:
    trace: Path
    kind: str  # "args", "metadata", "event" (an event's own field) or "bytes"
    detail: str  # what was done, for the record
    data: bytes  # the file's bytes
    suffix: str = ".json"
    # for "args"/"metadata": what the mutation may reach (baseline rows matching these are not compared)
    reach: dict[str, set[Any]] = field(default_factory=dict)
    whole: bool = False  # the mutation may reach every row (not compared)
    stem: str = "trace"  # the trace's file name without its suffix (a token in it must not leak)
    doctor: str = ""  # how the worker damages the ingest output before `atlas report` (see DOCTORS)

    def __repr__(self) -> str:
        return f"Case({self.trace.name}, {self.kind}: {self.detail}, {len(self.data):,} bytes{self.suffix})"


def _dumps(doc: Any, raws: dict[str, str]) -> bytes:
    text = json.dumps(doc)
    for token, raw in raws.items():
        text = text.replace(f'"{token}"', raw)
    return text.encode()


def _place(value: Any, raws: dict[str, str]) -> Any:
    if isinstance(value, Raw):
        token = f"__atlas_raw_{len(raws)}__"
        raws[token] = value.text
        return token
    return value


def _events_of(doc: dict[str, Any], cats: tuple[str, ...] | None) -> list[int]:
    events = doc.get("traceEvents", [])
    return [
        i for i, e in enumerate(events)
        if isinstance(e, dict) and e.get("ph") == "X" and (cats is None or e.get("cat") in cats)
    ]  # fmt: skip


def _ids(value: Any) -> set[Any]:
    """The ids a value could be read as (an int, or an int written as text)."""
    if isinstance(value, bool):
        return set()
    if isinstance(value, int):
        return {value}
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return {int(value)}
    if isinstance(value, str):
        try:
            return {int(value)}
        except ValueError:
            return set()
    return set()


# What an args key of a GPU activity feeds in its own row (the rest of the row must not change).
_OWN_COLUMNS = {
    "correlation": {"correlation", "launcher", "input_dims", "input_types"},
    "External id": {"external_id", "launcher", "input_dims", "input_types"},
    "device": {"device"},
    "stream": {"stream"},
    "grid": {"grid"},
    "block": {"block"},
}
_SHAPE_KEYS = ("Input Dims", "Input type", "Input Strides", "Concrete Inputs")
_COLLECTIVE_KEYS = ("Collective name", "In msg nelems", "Out msg nelems", "Group size", "dtype",
                    "Process Group Name", "Process Group Ranks", "Seq")  # fmt: skip


def _reach(event: dict[str, Any], key: str, new: Any) -> tuple[dict[str, set[Any]], bool]:
    """What an args mutation of `event` may change: rows of other activities (by correlation or
    External id, old and new) and, for a GPU activity, the columns of its own row that `key`
    feeds; (reach, whole) — `whole`: anything (not compared)."""
    args = event.get("args") if isinstance(event.get("args"), dict) else {}
    cat = event.get("cat")
    reach: dict[str, set[Any]] = {"correlation": set(), "external_id": set(), "key": set(), "columns": set()}
    if cat in GPU_CATS:
        reach["key"] = {(event.get("name"), event.get("ts"))}
        reach["columns"] = _OWN_COLUMNS.get(key, set())
        if key == "correlation":
            reach["correlation"] = _ids(new)
        if key == "External id":
            reach["external_id"] = _ids(new)
        return reach, False
    if cat in RUNTIME_CATS:  # a launch: only what links it to its kernel
        if key in ("correlation", "External id", "kernel"):
            reach["correlation"] = _ids(args.get("correlation")) | (_ids(new) if key == "correlation" else set())
            reach["external_id"] = _ids(new) if key == "External id" else set()
        return reach, False
    if cat == "cpu_op":  # its kernels carry its External id; collectives are completed from it
        if key in ("External id", "correlation", *_SHAPE_KEYS):
            reach["external_id"] = _ids(args.get("External id")) | (_ids(new) if key == "External id" else set())
            reach["correlation"] = _ids(new) if key == "correlation" else set()
        return reach, key in _COLLECTIVE_KEYS or key == "kernel_kwargs"
    return reach, False  # python frames, annotations: call stacks and steps are not compared


@st.composite
def cases(draw: st.DrawFn, paths: tuple[Path, ...] | None = None) -> Case:
    path = draw(st.sampled_from(paths or tuple(trace_paths())))
    kind = draw(st.sampled_from(["args", "args", "metadata", "event", "bytes", "bytes", "wide", "doctored", "shape"]))
    doc = copy.deepcopy(parsed(path))
    raws: dict[str, str] = {}
    case = Case(path, kind, "", b"")
    events = doc["traceEvents"]
    if kind == "args":
        cats = draw(st.sampled_from([GPU_CATS, RUNTIME_CATS, ("cpu_op",), ("python_function",), None]))
        candidates = _events_of(doc, cats) or _events_of(doc, None)
        index = draw(st.sampled_from(candidates))
        event = events[index]
        if not isinstance(event.get("args"), dict):
            event["args"] = {}
        action = draw(st.sampled_from(["set", "set", "delete", "duplicate"]))
        present = sorted(event["args"])
        key = draw(st.sampled_from(present if action == "delete" and present else [*KNOWN_ARGS, "odd key"]))
        value = draw(hostile_values())
        case.reach, case.whole = _reach(event, key, value)
        if action == "delete":
            event["args"].pop(key, None)
        elif action == "set":
            event["args"][key] = _place(value, raws)
        else:  # the key twice: first as the trace had it, then hostile (JSON readers take the last)
            token = f"__atlas_dup_{len(raws)}__"
            raws[token] = json.dumps(key)
            args = {token: event["args"].get(key, 0), **{k: v for k, v in event["args"].items() if k != key}}
            args[key] = _place(value, raws)
            event["args"] = args
        case.detail = f"{action} {event.get('cat')}[{index}].args[{key!r}] = {value!r}"[:300]
        data = _dumps(doc, raws)
    elif kind == "metadata":
        target = draw(st.sampled_from(["deviceProperties", "distributedInfo", "member"]))
        value = draw(hostile_values())
        if target == "deviceProperties" and isinstance(doc.get("deviceProperties"), list) and doc["deviceProperties"]:
            key = draw(st.sampled_from(["name", "numSms", "id", "totalGlobalMem", "whole"]))
            if key == "whole":
                doc["deviceProperties"] = _place(value, raws)
            else:
                doc["deviceProperties"][0][key] = _place(value, raws)
        elif target == "distributedInfo":
            key = draw(st.sampled_from(["rank", "world_size", "backend", "whole"]))
            if key == "whole":
                doc["distributedInfo"] = _place(value, raws)
            else:
                doc.setdefault("distributedInfo", {})
                if not isinstance(doc["distributedInfo"], dict):
                    doc["distributedInfo"] = {}
                doc["distributedInfo"][key] = _place(value, raws)
        else:
            key = draw(st.sampled_from(["otherData", "traceName", "schemaVersion", "displayTimeUnit"]))
            doc[key] = _place(value, raws)
        case.detail = f"{target}.{key} = {value!r}"[:300]
        data = _dumps(doc, raws)
    elif kind == "event":
        index = draw(st.sampled_from(_events_of(doc, None) or list(range(len(events)))))
        key = draw(st.sampled_from([*EVENT_FIELDS, "whole"]))
        if key == "whole":  # the event replaced by a value that is no object (null, a number, a list…)
            value = draw(hostile_values().filter(lambda v: not isinstance(v, dict)))
            events[index] = _place(value, raws)
            case.detail = f"[{index}] = {value!r}"[:300]
        elif draw(st.booleans()) and isinstance(events[index], dict):
            events[index].pop(key, None)
            case.detail = f"delete [{index}].{key}"
        else:
            value = draw(hostile_values())
            if isinstance(events[index], dict):
                events[index][key] = _place(value, raws)
            case.detail = f"[{index}].{key} = {value!r}"[:300]
        data = _dumps(doc, raws)
    elif kind == "wide":  # many distinct values in one dictionary column (an int8 index overflowed)
        key = draw(st.sampled_from(["Collective name", "dtype", "Process Group Name"]))
        count = draw(st.sampled_from([128, 300]))
        gpu = _events_of(doc, GPU_CATS)
        for i, index in enumerate(gpu[:count]):
            if not isinstance(events[index].get("args"), dict):
                events[index]["args"] = {}
            events[index]["args"][key] = f"v{i}"
        case.detail, case.whole = f"{min(count, len(gpu))} distinct {key!r} values", True
        data = json.dumps(doc).encode()
    elif kind == "shape":  # what costs by its shape, not its values (stop 47's campaign)
        shape = draw(st.sampled_from(sorted(SHAPES)))
        SHAPES[shape](doc)
        case.detail, case.whole = shape, True
        data = json.dumps(doc).encode()
    else:
        data = json.dumps(doc).encode()
        if kind == "doctored":
            case.doctor = draw(st.sampled_from(sorted(DOCTORS)))
            case.detail, case.whole = f"output doctored: {case.doctor}", True
    if draw(st.integers(0, 7)) == 0:  # a credential in the file name
        case.stem = f"run_{draw(st.sampled_from(SECRETS))}"
    if kind == "bytes" or draw(st.integers(0, 9)) == 0:  # byte damage, sometimes on top of the rest
        compression = draw(st.sampled_from(["", "", "gzip", "zstd"]))
        if compression == "gzip":
            data, case.suffix = gzip.compress(data, 6), ".json.gz"
        elif compression == "zstd":
            import zstandard

            data, case.suffix = zstandard.ZstdCompressor().compress(data), ".json.zst"
        damage = draw(st.sampled_from(["truncate", "flip", "delete", "duplicate", "insert", "none"]))
        at = draw(st.integers(0, max(len(data) - 1, 0)))
        size = draw(st.integers(1, 64))
        if damage == "truncate":
            data = data[:at]
        elif damage == "flip":
            data = data[:at] + bytes(b ^ draw(st.integers(1, 255)) for b in data[at : at + size]) + data[at + size :]
        elif damage == "delete":
            data = data[:at] + data[at + size :]
        elif damage == "duplicate":
            data = data[:at] + data[at : at + size] * 2 + data[at + size :]
        elif damage == "insert":
            data = data[:at] + draw(st.binary(min_size=1, max_size=size)) + data[at:]
        case.detail = (case.detail + f"; {compression or 'plain'} {damage} at {at} ({size})").lstrip("; ")
        if damage != "none" or kind == "bytes":
            case.kind, case.whole = "bytes", True
    case.data = data
    return case


# --- running -----------------------------------------------------------------------------------


@dataclass
class Outcome:
    ingest: int  # exit code; -1: no result (timed out, worker died)
    ingest_err: str
    report: int | None = None  # exit code when the ingest succeeded
    report_err: str = ""
    report_out: str = ""
    seconds: float = 0.0
    died: str = ""  # why there is no result
    doctored: bool = False  # the output was damaged (`Case.doctor`) before the report


def _limit_memory() -> None:  # in the worker, before it starts
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


class Runner:
    """A worker process running `atlas ingest FILE -o OUT` then `atlas report OUT` in-process,
    its address space capped; restarted after a crash, a timeout, or every 200 cases."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.proc: subprocess.Popen[str] | None = None
        self.done = 0

    def _start(self) -> subprocess.Popen[str]:
        if self.proc is None or self.proc.poll() is not None or self.done >= 200:
            self.close()
            env = {**os.environ, "COLUMNS": "120", "PYTHONPATH": str(REPO)}
            env.pop("ATLAS_DEBUG", None)
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tests.support.fuzz"], cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL, text=True, env=env, preexec_fn=_limit_memory,
            )  # fmt: skip
            self.done = 0
        return self.proc

    def run(self, case: Case, name: str | None = None) -> tuple[Outcome, Path, Path]:
        proc = self._start()
        name = name or case.stem
        trace = self.folder / f"{name}{case.suffix}"
        out = self.folder / "out.atlas"  # never named after the trace: a token in its name stays out
        for old in self.folder.glob("run_*"):  # an earlier case's trace named after a token
            old.unlink()
        trace.write_bytes(case.data)
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(json.dumps({"trace": str(trace), "out": str(out), "doctor": case.doctor}) + "\n")
        proc.stdin.flush()
        ready, _, _ = select.select([proc.stdout], [], [], TIME_LIMIT_S)
        line = proc.stdout.readline() if ready else ""
        self.done += 1
        if not line:
            died = "timed out" if not ready else f"worker died (exit {proc.wait(timeout=30)})"
            self.close()
            return Outcome(-1, "", died=died), trace, out
        return Outcome(**json.loads(line)), trace, out

    def close(self) -> None:
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait()
            self.proc = None


def _rewrite(out: Path, change: Any) -> bool:
    """Rewrite every rank file of `out` with `change(table)`, its metadata (the run id) kept;
    whether a file had rows to damage."""
    import pyarrow.parquet as pq

    damaged = False
    for file in sorted((out / "kernels.parquet").glob("rank=*/*.parquet")):
        table = pq.read_table(file)
        if table.num_rows:
            pq.write_table(change(table).replace_schema_metadata(table.schema.metadata), file)
            damaged = True
    return damaged


def _first(column: str, value: Any) -> Any:
    """A change setting the first row of `column` to `value`."""
    import pyarrow as pa

    def change(table: Any) -> Any:
        values = table.column(column).to_pylist()
        values[0] = value
        kind = table.schema.field(column).type
        kind = kind.value_type if pa.types.is_dictionary(kind) else kind
        return table.set_column(table.column_names.index(column), column, pa.array(values, kind))

    return change


def _without(column: str) -> Any:
    return lambda out: _rewrite(out, lambda table: table.drop([column]))


def _extra_rank(out: Path) -> bool:
    import shutil

    files = sorted((out / "kernels.parquet").glob("rank=*/*.parquet"))
    if files:
        (out / "kernels.parquet" / "rank=999").mkdir(exist_ok=True)
        shutil.copy(files[0], out / "kernels.parquet" / "rank=999" / files[0].name)
    return bool(files)


def _thread_of(doc: dict[str, Any]) -> tuple[Any, Any, float]:
    """(pid, tid, ts) of the trace's first CPU op, else of its first event with a time."""
    timed = [e for e in doc["traceEvents"] if isinstance(e, dict) and isinstance(e.get("ts"), (int, float))]
    first = next((e for e in timed if e.get("cat") == "cpu_op"), timed[0] if timed else {})
    return first.get("pid", 1), first.get("tid", 1), float(first.get("ts", 0.0))


def _tiny_events(doc: dict[str, Any]) -> None:
    doc["traceEvents"] += [{}] * 300_000  # 3 bytes of text each, a struct each on the forgiving path


def _same_time_nest(doc: dict[str, Any]) -> None:
    pid, tid, ts = _thread_of(doc)
    launch = {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": pid, "tid": tid, "ts": ts, "dur": 1}
    doc["traceEvents"] += [{**launch, "args": {"correlation": 10**9 + i}} for i in range(3000)]  # nest 3,000 deep


def _deep_nest(doc: dict[str, Any]) -> None:
    pid, tid, ts = _thread_of(doc)
    doc["traceEvents"] += [
        {"ph": "X", "cat": "cpu_op", "name": f"aten::nest{i % 7}", "pid": pid, "tid": tid, "ts": ts + i * 0.001,
         "dur": 2 * (30_000 - i) * 0.001 + 1, "args": {"External id": 10**9 + i}}
        for i in range(30_000)
    ]  # fmt: skip


def _backtracking_names(doc: dict[str, Any]) -> None:
    kernels = [e for e in doc["traceEvents"] if isinstance(e, dict) and e.get("cat") == "kernel"]
    for i, event in enumerate(kernels[:3]):  # `gemm\w*?tf32` backtracks over every `gemm`
        event["name"] = "gemm_" * 3200 + str(i)


def _dotted_modules(doc: dict[str, Any]) -> None:
    frames = [e for e in doc["traceEvents"] if isinstance(e, dict) and e.get("cat") == "python_function"]
    for event in frames[:50]:  # a cut name of 16k characters, 8,000 levels (stop 54: 21 s ingest, 1.4 GB report)
        event["name"] = "nn.Module: " + "a.b.c." * 3000


def _ranges_in_other_phases(doc: dict[str, Any]) -> None:
    kernels = [e for e in doc["traceEvents"] if isinstance(e, dict) and e.get("cat") == "kernel"]
    for event, phase in zip(kernels[:12], ["i", "I", "b", "C", "x", None] * 2, strict=False):
        if phase is None:  # a kernel instant was an internal error; the others were dropped unsaid
            event.pop("ph", None)
        else:
            event["ph"] = phase


def _below_the_clock(doc: dict[str, Any]) -> None:
    for event in doc["traceEvents"]:
        if isinstance(event, dict) and event.get("cat") in GPU_CATS:
            event["dur"] = 1e-300  # a SOL of 300 digits (5e-324: inf)


def _one_stream_at_one_start(doc: dict[str, Any]) -> None:
    activities = [e for e in doc["traceEvents"] if isinstance(e, dict) and e.get("cat") in GPU_CATS]
    for event in activities:  # every activity at the first one's start on one stream (stop 55: a path 16× the trace)
        event["ts"] = activities[0]["ts"]
        event["tid"] = 7
        if isinstance(event.get("args"), dict):
            event["args"]["stream"] = 7


def _copies_beyond_any_gpu(doc: dict[str, Any]) -> None:
    for event in doc["traceEvents"]:
        copy = isinstance(event, dict) and event.get("cat") in ("gpu_memcpy", "gpu_memset", "Memcpy", "Memset")
        if copy and isinstance(event.get("args"), dict):
            event["args"]["bytes"] = 2**62  # stop 55: a SOL of 10^14 %


# Shapes of trace that cost by their count or depth rather than by their values.
SHAPES: dict[str, Any] = {
    "every GPU activity at one start on one stream": _one_stream_at_one_start,
    "copies of 2^62 bytes": _copies_beyond_any_gpu,
    "300k empty objects": _tiny_events,
    "3k launches at one time": _same_time_nest,
    "30k-deep nesting": _deep_nest,
    "backtracking names": _backtracking_names,
    "dotted module names": _dotted_modules,
    "ranges in other phases": _ranges_in_other_phases,
    "GPU activities below the clock": _below_the_clock,
}


def _twice(column: str) -> Any:
    import pyarrow as pa

    return lambda table: pa.Table.from_arrays(
        [*table.columns, table.column(column)], names=[*table.column_names, column]
    )


# Damage to an ingest output that `atlas report` must refuse in one line (issue 27).
DOCTORS: dict[str, Any] = {
    **{f"no {column}": _without(column) for column in ("launcher", "stream", "device", "module", "input_dims")},
    "negative dur": lambda out: _rewrite(out, _first("dur_us", -3.0)),
    "NaN dur": lambda out: _rewrite(out, _first("dur_us", float("nan"))),
    "inf ts": lambda out: _rewrite(out, _first("ts_us", float("inf"))),
    "huge dur": lambda out: _rewrite(out, _first("dur_us", 1e308)),
    "null name": lambda out: _rewrite(out, _first("name", None)),
    "deep input_dims": lambda out: _rewrite(out, _first("input_dims", "[" * 5000 + "]" * 5000)),
    "extra rank": _extra_rank,
    "null category": lambda out: _rewrite(out, _first("category", None)),
    "ts_us twice": lambda out: _rewrite(out, _twice("ts_us")),
    "token in a launcher": lambda out: _rewrite(out, _first("launcher", "aten::mm " + SECRETS[3])),
    # stop 48: shares and wave counts ingest never writes (the report copied them into its tables)
    "occupancy beyond 100": lambda out: _rewrite(out, _first("est_occupancy_pct", 1e6)),
    "infinite waves": lambda out: _rewrite(out, _first("waves", float("inf"))),
    # stop 54: summary.json fields its readers rely on (internal errors before its schema)
    "efficiency steps not a list": lambda out: _summary(out, "efficiency", {"steps": 5, "devices": []}),
    "last step of 400 digits": lambda out: _summary(out, "last_step_start_us", 10**400),
    "NaN in summary.json": lambda out: _summary(out, "last_step_start_us", float("nan")),
}


def _summary(out: Path, key: str, value: Any) -> bool:
    """summary.json with `key` of its first trace set to `value` (NaN written as Python writes it)."""
    path = out / "summary.json"
    summary = json.loads(path.read_text())
    if not summary.get("traces"):
        return False
    summary["traces"][0][key] = value
    path.write_text(json.dumps(summary))
    return True


def _serve() -> None:
    """The worker: one JSON job per line in, one `Outcome` per line out."""
    import shutil

    from typer.testing import CliRunner

    from kernel_atlas.cli import app

    runner = CliRunner()
    for line in sys.stdin:
        job = json.loads(line)
        shutil.rmtree(job["out"], ignore_errors=True)
        start = time.monotonic()
        ingest = runner.invoke(app, ["ingest", job["trace"], "-o", job["out"], "-q"])
        result = {"ingest": ingest.exit_code, "ingest_err": ingest.stderr}
        if ingest.exit_code == 0 and job.get("doctor"):
            result["doctored"] = DOCTORS[job["doctor"]](Path(job["out"]))
        if ingest.exit_code == 0:
            report = runner.invoke(app, ["report", job["out"]])
            result.update(report=report.exit_code, report_err=report.stderr, report_out=report.stdout)
        result["seconds"] = time.monotonic() - start
        print(json.dumps(result), flush=True)


# --- the contract ----------------------------------------------------------------------------------


@functools.cache
def baseline(path: Path) -> Any:  # -> pd.DataFrame: the trace ingested unmutated
    from kernel_atlas.ingest.pipeline import ingest_trace

    return ingest_trace(path).frame


def _one_line_error(err: str, trace: Path | None) -> str | None:
    from kernel_atlas.core.redact import redact_text

    lines = [line for line in err.splitlines() if line.strip()]
    if len(lines) != 1:
        return f"{len(lines)} lines on stderr"
    if not lines[0].startswith("error: "):
        return "the line is not an error"
    if trace is not None and redact_text(str(trace)) not in lines[0]:  # a token in the name is redacted
        return "the error does not name the file"
    return None


def check(case: Case, outcome: Outcome, trace: Path, out: Path) -> list[str]:
    """The contract's breaches for one case (empty: the case passed)."""
    problems = []
    if outcome.died:
        return [outcome.died]
    for err in (outcome.ingest_err, outcome.report_err, outcome.report_out):
        if "Traceback" in err or "internal error" in err:
            problems.append("traceback or internal error: " + err.strip().splitlines()[-1][:300])
        problems += [f"{secret[:8]}… printed" for secret in LEAKS if secret in err]
    if outcome.ingest == 2:
        why = _one_line_error(outcome.ingest_err, trace)
        if why:
            problems.append(f"ingest exit 2 with {why}: {outcome.ingest_err.strip()[:300]}")
        if case.kind in ("args", "metadata", "event") and not case.whole:
            problems.append("a mutation confined to one value rejected the trace: " + outcome.ingest_err.strip()[:300])
        return problems
    if outcome.ingest != 0:
        return [*problems, f"ingest exit {outcome.ingest}: {outcome.ingest_err.strip()[:300]}"]
    for line in outcome.ingest_err.splitlines():
        if line.strip() and not line.startswith(("warning: ", "note: ")):
            problems.append(f"ingest exit 0 but stderr says: {line[:300]}")
    if outcome.doctored:  # the output was damaged after the ingest: the report refuses it, in one line
        if outcome.report != 2:
            return [*problems, f"a doctored output ({case.doctor}) was reported: exit {outcome.report}"]
        why = _one_line_error(outcome.report_err, None)
        return problems + [f"doctored output refused with {why}: {outcome.report_err.strip()[:200]}"] * bool(why)
    if case.doctor:  # nothing to damage (no GPU activity): the report of an intact output
        return problems
    if outcome.report not in (0, 2):
        problems.append(f"report exit {outcome.report}: {outcome.report_err.strip()[:300]}")
    elif outcome.report == 2:
        why = _one_line_error(outcome.report_err, None)
        if why:
            problems.append(f"report exit 2 with {why}: {outcome.report_err.strip()[:300]}")
    return problems + _check_output(case, out)


def _check_output(case: Case, out: Path) -> list[str]:
    import numpy as np
    import pandas as pd

    from kernel_atlas.core.errors import AtlasError
    from kernel_atlas.store.outputs import load_kernels, open_output

    try:
        output = open_output(out)
        frame = load_kernels(out)
    except AtlasError as exc:
        return [f"the output does not read back: {exc}"]
    problems = []
    for file in (f for f in out.rglob("*") if f.is_file()):
        data = file.read_bytes()
        problems += [f"{secret[:8]}… written into {file.name}" for secret in LEAKS if secret.encode() in data]
        problems += [f"{secret[:8]}… in the file name {file.name}" for secret in LEAKS if secret in str(file)]
    ts, dur = frame["ts_us"].to_numpy(float), frame["dur_us"].to_numpy(float)
    if len(frame) and not (np.isfinite(ts).all() and np.isfinite(dur).all() and (dur >= 0).all()):
        problems.append("a GPU activity without a usable time is in the table")
    facts = output.summary["traces"][0]
    kernels = frame[frame["kind"] == "kernel"]
    if facts["kernels"] != len(kernels) or not math.isclose(
        facts["kernel_time_us"], float(kernels["dur_us"].sum()), rel_tol=1e-9, abs_tol=1e-6
    ):
        problems.append("summary.json disagrees with kernels.parquet")
    problems += _report_bounds(out, frame)
    if case.kind not in ("args", "metadata") or case.whole:
        return problems
    # the oracle: what the mutation could not reach is exactly as ingested unmutated
    base = baseline(case.trace)
    reach = case.reach

    def untouched(table: pd.DataFrame) -> pd.DataFrame:
        keys = zip(table["name"].astype(object), table["ts_us"], strict=True)
        mutated = np.array([key in reach.get("key", set()) for key in keys], dtype=bool)
        keep = np.ones(len(table), dtype=bool)
        for column in ("correlation", "external_id"):  # other activities the mutation may relink
            values = table[column].astype("Int64").astype(object)
            keep &= ~values.isin(list(reach.get(column, set()))).to_numpy(bool)
        rows = table.loc[keep | mutated, COMPARED].astype(object)
        rows = rows.where(rows.notna(), None)
        mutated = mutated[keep | mutated]
        for column in reach.get("columns", set()):  # the mutated activity: only what its key feeds may change
            rows.loc[mutated, column] = None
        return rows.sort_values(["ts_us", "name"], kind="stable").reset_index(drop=True)

    expected, found = untouched(base), untouched(frame)
    if not expected.equals(found):
        merged = expected.merge(found, how="outer", indicator=True)
        changed = merged[merged["_merge"] != "both"].head(2).to_dict("records")
        problems.append(f"rows the mutation could not reach changed: {changed}"[:600])
    return problems


def _report_bounds(out: Path, frame: Any) -> list[str]:
    """What any report must hold whatever the trace: a critical path no longer than the run's
    span (its first start to its last end, host ranges included), shares of GPU time within
    0–100 %, no negative uncosted time."""
    import numpy as np
    import pandas as pd

    from kernel_atlas.ingest.host_events import load_host_events

    report_path = out / "report.json"
    if not report_path.is_file():
        return []
    report = json.loads(report_path.read_text())
    problems = []
    trust = report.get("trust") or {}
    costed_pct = trust.get("costed_pct", 0.0)
    if (costed_pct is not None and not 0.0 <= costed_pct <= 100.0) or trust.get("uncosted_time_us", 0.0) < 0.0:
        problems.append(f"trust shares out of range: {trust.get('costed_pct')} %, {trust.get('uncosted_time_us')} µs")
    starts = [frame["ts_us"].to_numpy(float)]
    ends = [starts[0] + frame["dur_us"].to_numpy(float)]
    host = load_host_events(out, int(frame["rank"].iloc[0])) if len(frame) else None
    if host is not None and len(host):
        starts.append(host["ts_us"].to_numpy(float))
        ends.append(host["end_us"].to_numpy(float))
    first, last = min(a.min(initial=np.inf) for a in starts), max(a.max(initial=-np.inf) for a in ends)
    path = (report.get("critical_path") or {}).get("total_us")
    if isinstance(path, int | float) and np.isfinite(last - first) and path > (last - first) * (1 + 1e-9) + 1e-3:
        problems.append(f"critical path of {path} µs in a run of {last - first} µs")
    roofline = out / "roofline.parquet"
    if roofline.is_file():
        table = pd.read_parquet(roofline)
        for column in ("est_occupancy_pct", "wave_efficiency_pct", "tensor_core_pct"):
            if column in table and not table[column].dropna().between(0.0, 100.0).all():
                problems.append(f"roofline {column} outside 0–100 %")
    return problems


if __name__ == "__main__":
    _serve()
