"""`atlas mcp`: a Model Context Protocol server over stdio, for agents that read profiles.

Read-only tools over the run folders (`atlas ingest` / `atlas report` outputs) under one root:
`runs`, `summary`, `top_kernels`, `findings`, `query`, `explain`, `diff` and `critical_path`.
Every run is named by its path relative to the root; a path that leaves the root (`..`, an
absolute path, a symbolic link out of it) is refused. A run is read under its folder's shared
lock, as the command line's readers read it: while an ingest or a report writes it, a tool is
refused in one line ("being written by another atlas command"). `query` runs one SQL SELECT
through DuckDB over the run's tables, registered as Arrow datasets on a connection with file
access disabled and its configuration locked, so that SQL can neither read other files nor
write any (a table made from another ingest run's kernels than the folder's is left out); each
query runs in a process of its own, one at a time, killed past its time and memory bounds.
Results have row, text, nesting and size limits (the size as the SDK writes an answer,
indented), and every text that leaves the server goes through the credential redaction the rest
of Kernel Atlas uses — requests are redacted as they are decoded, escapes and all. A tool call
whose arguments do not fit its parameters is refused in one line, without their values.

The tool functions are plain functions of `Tools` (tested without a client); `serve` registers
them with the MCP SDK's server and runs it on stdin/stdout.
"""

from __future__ import annotations

import json
import math
import os
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

from kernel_atlas.core.beside import Beside, ChildLost, OverBound
from kernel_atlas.core.errors import AtlasError
from kernel_atlas.core.redact import CUT_TAIL, redact_cut, redact_message, redact_text, redact_value
from kernel_atlas.core.safe_files import LOCK_NAME, os_problem
from kernel_atlas.store.outputs import KERNELS, SUMMARY, lock, open_output, read_report, table_run

MAX_ROWS = 500  # the most rows a tool returns
QUERY_SECONDS = 30  # the most time one `query` may take
EXPLAIN_SECONDS = 30  # and one `explain` (every name rule tried on one name)
# and memory: how much its process may grow over the server it is forked from (~180 MB, which the
# child's resident size counts again: the two processes' sizes summed stay under 1 GB; looked at
# every 20 ms, so it may pass a little)
QUERY_MEMORY, QUERY_MEMORY_BYTES = "560 MiB", 560 << 20
DUCKDB_MEMORY = "400MiB"  # of which DuckDB's own limit (its refusal is the clearer one)
MAX_TEXT = 10_000  # the most characters of one text a query returns
MAX_ANSWER_BYTES = 16 << 20  # and of its whole answer, as JSON written indented (as the SDK writes it)
MAX_NESTING = 32  # the most levels of lists and structs inside a query's answer
# answers worked out in a process beside the server at a time (queries, explanations): each may
# grow by QUERY_MEMORY; a call waits at most BUSY_WAIT_SECONDS for its turn, then is refused
BESIDE_AT_ONCE, BUSY_WAIT_SECONDS = 1, 25.0
MAX_RUNS = 1000  # the most runs `runs` lists
MAX_DEPTH = 4  # how deep under the root `runs` looks
MAX_RUN_NAME = 200  # the most characters of a run name a refusal repeats
TABLES_SKIPPED = {KERNELS}  # registered apart (a partitioned dataset)
# DuckDB's folders default to the server's home (`duckdb_settings()` showed `secret_directory =
# /root/.duckdb/stored_secrets`; a refused `duckdb_secrets()` or `duckdb_extensions()` named the
# folder it may not read): the server's own folders are none of the agent's business. Neither is
# read — no secret is stored or loaded, no extension installed or loaded — so each is named by
# what it is, not where it lies.
NOT_USED = "(not used)"
DUCKDB_CONFIG = {
    "autoload_known_extensions": False,
    "autoinstall_known_extensions": False,
    "allow_persistent_secrets": False,  # the user's stored secrets are never looked for
    "secret_directory": NOT_USED,
    "extension_directory": NOT_USED,
}


def _clean(value: Any, max_text: int | None = None) -> Any:
    """JSON-safe: NaN/inf → None, numpy scalars → Python, credentials redacted (keys too: a
    query's column alias or a key of report.json is text like any other); with `max_text`, every
    text (keys and texts inside lists and structs too) cut to that many characters with a note
    saying how long it was (an agent gets an answer, not a 500 MB cell). One walk does it all."""
    if isinstance(value, dict):
        return {_clean(str(k), max_text): _clean(v, max_text) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v, max_text) for v in value]
    if isinstance(value, str | bytes):
        if max_text is not None and len(value) > max_text:
            text = value if isinstance(value, str) else value[: max_text + CUT_TAIL].decode("utf-8", "replace")
            unit = "characters" if isinstance(value, str) else "bytes"
            return redact_cut(text, max_text) + f"… (cut: {len(value):,} {unit} in all)"
        return redact_text(value if isinstance(value, str) else value.decode("utf-8", "replace"))
    if hasattr(value, "item"):
        try:
            value = value.item()
        except (ValueError, TypeError):
            value = str(value)
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return redact_value(value)


class Tools:
    """The server's tools over the runs under `root`."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root).resolve()
        if not self.root.is_dir():
            raise AtlasError(root, "not a folder: give --root a folder that holds run folders")

    # --- paths -------------------------------------------------------------------------------

    def run_dir(self, run: str) -> Path:
        """The run folder `run` (relative to the root); refused when it leaves the root."""
        if not isinstance(run, str) or "\x00" in run:
            raise AtlasError(run, "not a run name")
        candidate = Path(run)
        named = run if len(run) <= MAX_RUN_NAME else run[:MAX_RUN_NAME] + "…"
        if candidate.is_absolute():
            raise AtlasError(named, "give the run's path relative to the server's root")
        try:
            resolved = (self.root / candidate).resolve()
            if resolved != self.root and self.root not in resolved.parents:
                raise AtlasError(named, "outside the server's root")
            if not (resolved / SUMMARY).is_file() and not (resolved / KERNELS).exists():
                if (resolved / LOCK_NAME).is_file():  # an ingest clears the run it replaces: say so
                    with lock(resolved, shared=True):
                        pass
                raise AtlasError(named, "not a run folder (no summary.json): list them with the `runs` tool")
        except OSError as exc:  # a name longer than the system takes (ENAMETOOLONG), a loop of links
            raise AtlasError(named, f"not a run folder ({exc.strerror or exc})") from None
        return resolved

    @contextmanager
    def held(self, run: str) -> Iterator[Path]:
        """The run folder `run`, under its shared lock for the block (`outputs.lock`), as `atlas
        diff` and `dashboard` read: an ingest clearing it between two reads had a tool fail with
        no reason given (pyarrow's FileNotFoundError) and a traceback on the server's stderr."""
        folder = self.run_dir(run)
        with lock(folder, shared=True):
            yield folder

    def _name(self, path: Path) -> str:
        relative = path.relative_to(self.root).as_posix()
        return relative or "."

    # --- tools ------------------------------------------------------------------------------------

    def runs(self) -> dict[str, Any]:
        """The run folders under the root (at most 4 levels deep), each with its traces, its
        GPUs and whether `atlas report` ran on it (`reported`); a run whose files cannot be
        read carries an `error` instead."""
        found: list[dict[str, Any]] = []
        for folder, dirs, files in os.walk(self.root, followlinks=False):
            path = Path(folder)
            depth = len(path.relative_to(self.root).parts)
            dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d != KERNELS)
            if depth >= MAX_DEPTH:
                dirs[:] = []
            if SUMMARY in files and (path / KERNELS).exists():
                dirs[:] = []
                found.append(self._run_entry(path))
                if len(found) >= MAX_RUNS:
                    break
        # each entry cleaned already: an `error` redacted as one text loses words (`_run_entry`)
        return {"root": _clean(str(self.root)), "runs": found, "truncated": len(found) >= MAX_RUNS}

    def _run_entry(self, path: Path) -> dict[str, Any]:
        """One run of `runs`; a run whose summary.json or report.json cannot be read is listed
        with an `error` (one damaged report.json failed the whole call: no run could be found)."""
        try:
            with lock(path, shared=True):
                output = open_output(path)
                reported = read_report(path, output.run_id) is not None
            summary = output.summary
            traces = summary.get("traces", [])
            entry = {
                "run": self._name(path),
                "traces": [t.get("file") for t in traces],
                "gpus": sorted({g.get("name", "?") for t in traces for g in t.get("gpus", [])}),
                "reported": reported,
            }
        except AtlasError as exc:
            return {"run": _clean(self._name(path)), "error": self.refusal(exc)}
        return _clean(entry)

    def refusal(self, exc: AtlasError) -> str:
        """An `AtlasError` as the agent reads it: a path under the root said relative to it (the
        server's own folders are none of the agent's business, and a run is named so), the file
        and the problem redacted apart (`redact.redact_message`: a run named `secret` before `: not
        a run folder` lost its `not`)."""
        root = str(self.root)
        source = exc.source
        if source is not None and (source == root or source.startswith(root + os.sep)):
            source = self._name(Path(source))
        problem = exc.problem.replace(root + os.sep, "").replace(root, ".")
        return redact_message(source, problem)

    def summary(self, run: str) -> dict[str, Any]:
        """GPU time, busy/idle per device, GPUs, activity counts and — where `atlas report` ran —
        the costed share and the reasons for the rest."""
        with self.held(run) as folder:
            output = open_output(folder)
            kinds = self._select(
                folder, "SELECT kind, count(*) AS n, sum(dur_us) AS us FROM kernels GROUP BY kind", 100
            )
            report = read_report(folder, output.run_id)
        summary = output.summary
        # a fleet (or a hostile trace) lists thousands: the first MAX_ROWS of each, and how many there are
        listed = {key: summary.get(key, []) for key in ("traces", "devices", "warnings")}
        answer: dict[str, Any] = {
            "run": self._name(folder),
            "gpu_time_us": sum(row["us"] or 0.0 for row in kinds["rows"]),
            "activities": {row["kind"]: row["n"] for row in sorted(kinds["rows"], key=lambda r: str(r["kind"]))},
            "traces": [
                {"file": t.get("file"), "rank": t.get("rank"), "gpus": [g.get("name") for g in t.get("gpus", [])]}
                for t in listed["traces"][:MAX_ROWS]
            ],
            "devices": listed["devices"][:MAX_ROWS],
            "warnings": listed["warnings"][:MAX_ROWS],
        }
        answer.update({f"{key}_total": len(rows) for key, rows in listed.items() if len(rows) > MAX_ROWS})
        if report is None:
            answer["report"] = "not reported yet: run `atlas report` on this folder for costs, findings and waits"
        else:
            gpu = report.get("gpu_time_us") or 0.0
            costed = report.get("costed_time_us") or 0.0
            if report.get("gpu_time_us") is not None:  # the report's own sum (DuckDB adds in another order)
                answer["gpu_time_us"] = gpu
            answer["device"] = report.get("device")
            answer["costed_time_us"] = costed
            answer["costed_pct"] = min(100.0 * costed / gpu, 100.0) if gpu else None
            for key in ("no_shape_time_us", "no_model_time_us", "trust", "critical_path", "efficiency"):
                if key in report:
                    answer[key] = report[key]
        return _clean(answer)

    def top_kernels(self, run: str, limit: int = 20, rank: int | None = None) -> dict[str, Any]:
        """The kernels (and memcpys/memsets) taking the most GPU time, one row per kernel name
        and the op and category it ran for (a name launched by two ops is two rows): name,
        category, op_mapping, calls, total_us and pct_of_gpu_time — its share of all ranks' GPU
        time, or with `rank` of that rank's (a rank the run has not is refused, naming those it has)."""
        limit = _rows(limit)
        where = "" if rank is None else f"WHERE rank = {int(rank)}"
        # by op and category too: grouped by name alone, one of them stood for all its calls
        # (`add` for 3 calls of which 2, 82 % of the time, were `sub`)
        sql = (
            "SELECT name, category, op_mapping, "
            "count(*) AS calls, sum(dur_us) AS total_us, "
            "100.0 * sum(dur_us) / sum(sum(dur_us)) OVER () AS pct_of_gpu_time "
            f"FROM kernels {where} GROUP BY name, category, op_mapping "
            "ORDER BY total_us DESC, name, op_mapping NULLS LAST, category NULLS LAST"
        )
        with self.held(run) as folder:
            if rank is not None:  # a rank not here answered no rows, read as "no GPU time" (campaign BJ 5)
                _check_rank(folder, int(rank))
            return self._select(folder, sql, limit)

    def findings(self, run: str, limit: int = 10) -> dict[str, Any]:
        """What to fix first: report.json's ranked findings where `atlas report` wrote them;
        otherwise the kernels with the most headroom over the roofline (roofline.parquet)."""
        limit = _rows(limit)
        with self.held(run) as folder:
            report = read_report(folder, open_output(folder).run_id)
            if report is not None and isinstance(report.get("findings"), list):
                found = report["findings"][:limit]
                return _clean({"run": self._name(folder), "source": "report.json", "findings": found})
            if report is None or not (folder / "roofline.parquet").is_file():
                raise AtlasError(run, "no report yet: run `atlas report` on this folder first")
            sql = (
                "SELECT name, op_mapping, category, input_dims, total_us, attainable_us, headroom_us, sol_pct, bound "
                "FROM roofline WHERE headroom_us > 0 ORDER BY headroom_us DESC"
            )
            rows = self._select(folder, sql, limit)
        return _clean({"run": self._name(folder), "source": "roofline.parquet headroom", "findings": rows["rows"]})

    def query(self, run: str, sql: str, limit: int = 200) -> dict[str, Any]:
        """One read-only SQL SELECT over the run's tables (`kernels`, `roofline`, `idle`, …):
        its columns and rows (at most `limit`; `truncated` says when more matched), each text
        cut to 10,000 characters."""
        with self.held(run) as folder:
            return self._select(folder, sql, _rows(limit))

    def tables(self, run: str) -> dict[str, Any]:
        """The tables `query` can read in a run, with their columns."""
        with self.held(run) as folder:
            return _bounded(partial(_tables, folder))

    def explain(self, kernel: str, launcher: str | None = None, stack: list[str] | None = None) -> dict[str, Any]:
        """How Kernel Atlas labels a kernel: the op and category, the rule that decided, what the
        name and the launcher say, and who won a conflict (each text cut to 10,000 characters)."""
        from kernel_atlas.classify.classifier import default_classifier

        default_classifier()  # loaded here, once: each explanation's process inherits it
        # cut as ingest cuts names (a 10 MB one took 54 s to label), and explained in a process of
        # its own, stopped past EXPLAIN_SECONDS: a rule backtracking over a name runs for minutes,
        # and this thread is no main thread, which a timer signal could stop
        return _bounded(partial(_explanation, kernel, launcher, stack), "explain", EXPLAIN_SECONDS)

    def diff(
        self, run_a: str, run_b: str, fail_above_pct: float | None = None, limit: int = 20, per_step: bool = False
    ) -> dict[str, Any]:
        """Run B against run A: GPU time per category and the largest op changes (at most
        `limit`), how comparable the runs are and, with `fail_above_pct`, the verdict of `atlas
        diff --fail-above`; with `per_step`, the time of one profiler step of each run instead of
        the whole run (`atlas diff --per-step`: both runs need ProfilerStep ranges)."""
        from kernel_atlas.analysis.diff import diff_runs
        from kernel_atlas.analysis.gate import MIN_SHARE, comparability, judge

        if fail_above_pct is not None and not float(fail_above_pct) >= 0.0:  # as `atlas diff --fail-above`
            raise AtlasError("fail_above_pct", f"{fail_above_pct}: give a percentage of 0 or more")
        try:
            result = diff_runs(self.run_dir(run_a), self.run_dir(run_b), bool(per_step))
        except AtlasError as exc:  # said in this tool's words: its argument, not the command line's flag
            raise AtlasError(exc.source, exc.problem.replace("--per-step", "`per_step`")) from None
        a, b = result.a, result.b
        limit = _rows(limit)
        keep = ["key", "a_us", "b_us", "delta_us", "status"]
        ops = result.level("op_mapping")
        ops = ops.reindex(ops["delta_us"].abs().sort_values(ascending=False, kind="stable").index)
        answer: dict[str, Any] = {
            "a": {"run": run_a, "gpus": a.gpus, "gpu_time_us": a.gpu_time_us},
            "b": {"run": run_b, "gpus": b.gpus, "gpu_time_us": b.gpu_time_us},
            "categories": result.level("category")[keep].to_dict(orient="records"),
            "ops": ops[keep].head(limit).to_dict(orient="records"),
            "comparability": comparability(
                result.table, a.gpus, b.gpus, a.window, b.window, (a.activities, b.activities)
            ).to_json(),
        }
        if fail_above_pct is not None:
            answer["verdict"] = judge(
                result.table,
                a.gpu_time_us,
                b.gpu_time_us,
                a.gpus,
                b.gpus,
                float(fail_above_pct),
                MIN_SHARE,
                a.window,
                b.window,
                (a.activities, b.activities),
            ).to_json()
        return _clean(answer)

    def critical_path(self, run: str, limit: int = 20) -> dict[str, Any]:
        """The critical path `atlas report` found: its length, the breakdown by bound, its time
        by category, op, kernel, module, frame and rank (`top`), where optimisation pays and
        each rank's path; every list cut to `limit` items (`truncated` says when one was)."""
        rows = _rows(limit)
        with self.held(run) as folder:
            report = read_report(folder, open_output(folder).run_id)
        if report is None:
            raise AtlasError(run, "no report yet: run `atlas report` on this folder first")
        path = report.get("critical_path")
        if not path:
            raise AtlasError(run, "this report has no critical path (the Kernel Atlas that wrote it computes none)")
        answer = dict(path) if isinstance(path, dict) else {"critical_path": path}
        cut = _cut_lists(answer, rows)
        cut["truncated"] = cut != answer
        return _clean(cut)

    def _select(self, folder: Path, sql: str, limit: int) -> dict[str, Any]:
        if not isinstance(sql, str) or not sql.strip():
            raise AtlasError("query", "give one SQL SELECT statement")
        return _bounded(partial(_select, folder, sql, limit))


def _check_rank(folder: Path, rank: int) -> None:
    """Refuse a rank the run has not, naming those it has (as `atlas whatif --rank` does)."""
    from kernel_atlas.store.outputs import output_ranks, ranks_named

    ranks = output_ranks(folder)
    if rank not in ranks:
        raise AtlasError("rank", f"no rank {rank} in this run ({ranks_named(ranks)})")


def _cut_lists(value: Any, rows: int) -> Any:
    """`value` with every list in it — also those inside objects and rows (`top.op`,
    `top.frame`, a rank's own lists) — cut to its first `rows` items: `limit` cut only the lists
    at the top, and `top` kept ten rows of each breakdown under `limit=2`."""
    if isinstance(value, dict):
        return {key: _cut_lists(item, rows) for key, item in value.items()}
    if isinstance(value, list):
        return [_cut_lists(item, rows) for item in value[:rows]]
    return value


def _explanation(kernel: str, launcher: str | None, stack: list[str] | None) -> dict[str, Any]:
    from kernel_atlas.classify.classifier import default_classifier
    from kernel_atlas.ingest.events import cut_long
    from kernel_atlas.ingest.frames import STACK_SEPARATOR

    call_stack = cut_long(STACK_SEPARATOR.join(stack)) if stack else None
    explanation = default_classifier().explain(cut_long(str(kernel)), cut_long(launcher), call_stack)
    label = explanation.label

    def opinion(o: Any) -> dict[str, Any] | None:
        return None if o is None else {"op": o.op, "source": o.source, "detail": o.detail}

    # every text of the answer cut as a query's are, with how long it was: the whole argument
    # echoed made a 300,000-character name a 300 kB answer
    return _clean(
        {
            "kernel": str(kernel),
            "op_mapping": label.op_mapping,
            "category": label.category,
            "rule": label.rule,
            "evidence": label.evidence,
            "detail": label.detail,
            "name": opinion(explanation.name),
            "launcher": opinion(explanation.launcher),
            "context": opinion(explanation.context),
            "conflict": explanation.conflict,
            "winner": explanation.winner,
            "why": explanation.resolution_why,
        },
        MAX_TEXT,
    )


# --- answers in a process of their own -----------------------------------------------------------


def _bounded(work: Callable[[], dict[str, Any]], what: str = "query", seconds: float = QUERY_SECONDS) -> dict[str, Any]:
    """`work` (DuckDB over a run, or an explanation) in a forked process, killed past `seconds`
    or once it has grown by QUERY_MEMORY_BYTES: DuckDB's own limits did not hold against one huge
    value (`repeat('x', 1.5e9)` ran 93 s and reached 6 GB — building a string neither checks the
    interrupt nor counts against `memory_limit`). Where no process can be forked, it runs here,
    bounded by DuckDB alone."""
    if not sys.platform.startswith("linux"):
        return work()
    if what == "query":  # imported once, here: each query's child inherits them (an explanation needs neither)
        import duckdb  # noqa: F401
        import pyarrow.dataset  # noqa: F401

    if not _TURNS.acquire(timeout=BUSY_WAIT_SECONDS):
        raise AtlasError(what, f"busy: waited {BUSY_WAIT_SECONDS:g} s for another call to end; try again")
    try:
        return _beside(work, what, seconds)
    finally:
        _TURNS.release()


# one process beside at a time: four queries at once each forked their own and held 1.2 GB together
_TURNS = threading.BoundedSemaphore(BESIDE_AT_ONCE)


def _beside(work: Callable[[], dict[str, Any]], what: str, seconds: float) -> dict[str, Any]:
    try:
        child: Beside[dict[str, Any]] = Beside(lambda _: work())
    except OSError:  # no process to be had: DuckDB's own bounds
        return work()
    most = "a query" if what == "query" else f"`{what}`"
    try:
        return child.result(seconds=seconds + 1.0, max_growth_bytes=QUERY_MEMORY_BYTES)
    except OverBound as exc:
        if exc.bound == "time":
            raise AtlasError(what, f"stopped after {seconds:g} s (the most {most} may take)") from None
        raise AtlasError(what, f"stopped past {QUERY_MEMORY} of memory (the most {most} may add)") from None
    except ChildLost as exc:
        raise AtlasError(what, f"the {what}'s process ended without an answer ({exc})") from None
    finally:
        child.stop()


def _connect(folder: Path) -> tuple[Any, dict[str, str]]:
    """An in-memory DuckDB connection with the run's tables registered as Arrow datasets,
    then file access disabled and the configuration locked; and the tables left out because
    they cannot be read (name → why)."""
    import duckdb
    import pyarrow as pa
    import pyarrow.dataset as ds

    output = open_output(folder)
    connection = duckdb.connect(":memory:", config=DUCKDB_CONFIG)
    try:
        kernels = ds.dataset(folder / KERNELS, format="parquet", partitioning="hive")
    except (OSError, ValueError, pa.ArrowException) as exc:  # changed since `open_output` read it
        raise AtlasError(folder / KERNELS, f"cannot read: {_first_line(exc)}") from None
    connection.register("kernels", kernels)
    unreadable: dict[str, str] = {}
    for path in sorted(folder.glob("*.parquet")):
        if path.name in TABLES_SKIPPED:
            continue
        try:  # one damaged table (`atlas report` rewrites them) costs only itself
            connection.register(path.stem, _table(path, output.run_id))
        except AtlasError as exc:
            unreadable[path.stem] = f"{path.name}: {exc.problem}"
        except (OSError, ValueError, pa.ArrowException) as exc:
            unreadable[path.stem] = f"{path.name}: {_first_line(exc)}"
    del output
    # an agent's query is bounded like any input: by DuckDB (memory, no spilling to disk; time,
    # in `_select`: `range(1e12)` ran for ever) and by `_bounded`'s process (what DuckDB misses)
    connection.execute(f"SET memory_limit = '{DUCKDB_MEMORY}'")
    connection.execute("SET temp_directory = ''")
    connection.execute("SET enable_progress_bar = false")  # it wrote to the server's stderr
    connection.execute("SET enable_external_access = false")
    connection.execute("SET lock_configuration = true")
    return connection, unreadable


def _table(path: Path, run_id: str | None) -> Any:
    """One table of the run as an Arrow dataset: a Parquet file, or a rank-partitioned folder
    (`host_events.parquet/rank=N/…`, as ingest writes the kernels; its `rank` column read from the
    folder names) — those folders had been skipped unsaid, though every table is readable by its
    stem. Refused (AtlasError) where it is a symbolic link, where a partitioned folder holds
    anything but `rank=N` folders of regular Parquet files (what `open_output` refuses in the
    kernels: nothing read through a link, nothing outside the folder), or where a file is of
    another ingest run than the kernels."""
    import pyarrow.dataset as ds

    from kernel_atlas.store.outputs import dataset_files  # the rule `open_output` reads the kernels by

    if path.is_symlink():
        raise AtlasError(path, "a symbolic link: not read (a run's tables are its own files)")
    if path.is_dir():
        files = dataset_files(path)
        if not files:
            raise AtlasError(path, "no Parquet files in its rank folders")
    elif path.is_file():
        files = [path]
    else:
        raise AtlasError(path, "not a regular file or folder")
    for file in files:
        # a table of another run (a report killed after it removed report.json left its
        # steps.parquet) was served as this run's: left out, as `check_derived` refuses it
        made_from = table_run(file)
        if run_id is not None and made_from is not None and made_from != run_id:
            raise AtlasError(
                file, "made from another ingest run's kernels than this folder's: run `atlas report` again"
            )
    if path.is_file():
        return ds.dataset(path, format="parquet")
    # the files listed and checked, not the folder walked again: what DuckDB reads is what was checked
    return ds.dataset([str(f) for f in files], format="parquet", partitioning="hive", partition_base_dir=str(path))


def _first_line(exc: BaseException) -> str:
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def _rows(limit: int) -> int:
    """A tool's `limit`: 1 or more (refused otherwise, as 0 rows were answered with one), at most
    MAX_ROWS."""
    if int(limit) < 1:
        raise AtlasError("limit", f"{limit}: give a number of rows of 1 or more (at most {MAX_ROWS})")
    return min(int(limit), MAX_ROWS)


def _select(folder: Path, sql: str, limit: int) -> dict[str, Any]:
    import duckdb

    connection, unreadable = _connect(folder)
    try:
        statements = connection.extract_statements(sql)
    except duckdb.Error as exc:
        raise AtlasError("query", f"not valid SQL: {str(exc).splitlines()[0]}") from None
    if len(statements) != 1 or statements[0].type != duckdb.StatementType.SELECT:
        raise AtlasError("query", "read-only: one SELECT statement only (no writes, settings or attachments)")
    timer = threading.Timer(QUERY_SECONDS, connection.interrupt)
    timer.start()
    try:
        cursor = connection.execute(sql)
        rows = cursor.fetchmany(limit + 1)
    except duckdb.InterruptException:
        raise AtlasError("query", f"stopped after {QUERY_SECONDS} s (the most a query may take)") from None
    except duckdb.Error as exc:
        left_out = f" (left out, not readable: {'; '.join(unreadable.values())})" if unreadable else ""
        raise AtlasError("query", str(exc).splitlines()[0] + left_out) from None
    finally:
        timer.cancel()
    columns = [str(d[0]) for d in cursor.description or []]  # cut with the rest, in one walk
    records = [dict(zip(columns, row, strict=False)) for row in rows[:limit]]
    answer = {"columns": columns, "rows": records, "truncated": len(rows) > limit}
    indent = _indentation(answer)  # before `_clean`'s walk: it refuses a nesting too deep for that
    return _within_answer_bytes(_clean(answer, MAX_TEXT), indent)


def _tables(folder: Path) -> dict[str, Any]:
    connection, unreadable = _connect(folder)
    names = [r[0] for r in connection.execute("SHOW TABLES").fetchall()]
    columns = {n: [c[0] for c in connection.execute(f"DESCRIBE {_identifier(n)}").fetchall()] for n in names}
    answer: dict[str, Any] = {"tables": columns}
    if unreadable:
        answer["unreadable"] = unreadable
    return _clean(answer)


def _identifier(name: str) -> str:
    """A table name quoted for SQL (a file named `x"; select 1; --.parquet` is a table too)."""
    return '"' + name.replace('"', '""') + '"'


def _indentation(value: Any) -> int:
    """How many bytes writing `value` as JSON indented by 2 a level adds to its compact form (the
    SDK writes a tool's answer so: a newline and 2·d spaces before each item at level d and each
    closing bracket) — a list of 10^6 zeros inside 150 lists was 2 MB compact and 315 MB so
    (589 s and 1.4 GB in the server itself). Refused past MAX_NESTING levels."""
    extra = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > MAX_NESTING:
            raise AtlasError("query", f"the answer nests lists or structs more than {MAX_NESTING} levels deep")
        inside = list(item.values()) if isinstance(item, dict) else item
        if inside:
            extra += len(inside) * (1 + 2 * depth) + 1 + 2 * (depth - 1)
            stack.extend((v, depth + 1) for v in inside if isinstance(v, dict | list | tuple))
    return extra


def _within_answer_bytes(answer: dict[str, Any], indent: int = 0) -> dict[str, Any]:
    """The answer, refused when its JSON passes MAX_ANSWER_BYTES (500 rows of long lists) as the
    SDK writes it (compact, plus `indent`, from `_indentation`): the server would hold it twice
    more, and no agent reads it."""
    size = len(json.dumps(answer, default=str)) + indent
    if size > MAX_ANSWER_BYTES:
        raise AtlasError(
            "query",
            f"the answer is {size / 2**20:,.0f} MiB of JSON, more than {MAX_ANSWER_BYTES >> 20} MiB: "
            "ask for fewer rows or columns, or aggregate",
        )
    return answer


TOOL_NAMES = ("runs", "summary", "top_kernels", "findings", "query", "tables", "explain", "diff", "critical_path")


def build_server(root: str | Path) -> Any:
    """The MCP server with every tool of `Tools(root)` registered (read-only annotations)."""
    from mcp.server.mcpserver import MCPServer
    from mcp.types import ToolAnnotations

    from kernel_atlas import __version__

    tools = Tools(root)
    server = MCPServer(
        name="kernel-atlas",
        version=__version__,  # serverInfo.version: `atlas -V`'s (it had been "")
        log_level="ERROR",
        instructions=(
            "Kernel Atlas run folders under "
            f"{tools.root}: start with `runs`, then `summary`, `findings` and `top_kernels` of a run; "
            "`tables` and `query` for anything else (DuckDB SQL, one SELECT)."
        ),
    )
    read_only = ToolAnnotations(readOnlyHint=True, destructiveHint=False, idempotentHint=True, openWorldHint=False)
    for name in TOOL_NAMES:
        method = getattr(tools, name)
        server.tool(name=name, description=_description(method), annotations=read_only)(_guarded(method))
    return server


def _description(method: Any) -> str:
    """A tool's description: its docstring as one paragraph (the docstring's indentation inside
    the text was the agent's to read)."""
    return " ".join((method.__doc__ or "").split())


def _screen(arguments: dict[str, Any]) -> None:
    """An agent's arguments refused as the command line's are (`unusable_argument`): texts that
    are no Unicode (a lone surrogate in SQL was a TypeError in DuckDB) and numbers that are not
    finite."""
    from kernel_atlas.core.safe_files import unusable_argument

    for name, value in arguments.items():
        found = unusable_argument(value)
        if found is not None:
            item, why = found
            problem = "not valid Unicode text (a lone surrogate)" if why == "text" else f"{item}: not a finite number"
            raise AtlasError(name, problem)


def _guarded(method: Any) -> Any:
    """A tool whose refusals reach the agent as one clear line (an MCP tool error)."""
    from functools import wraps

    from mcp.server.mcpserver.exceptions import ToolError

    @wraps(method)
    def tool(*args: Any, **kwargs: Any) -> Any:
        try:
            _screen(kwargs)
            return method(*args, **kwargs)
        except AtlasError as exc:
            raise ToolError(method.__self__.refusal(exc)) from None  # every tool is a bound `Tools` method
        except OSError as exc:  # the system refusing a read (a file gone meanwhile): one line, no traceback
            refused = AtlasError(exc.filename, f"cannot read: {os_problem(exc)}")
            raise ToolError(method.__self__.refusal(refused)) from None

    return tool


def serve(root: str | Path) -> None:
    """Serve over stdio, each message read through `BoundedLines` (core/rpc_lines.py)."""
    import anyio

    # Python leaves a stream closed at start as None; its descriptor is then the next file opened
    # (the event loop's own), which the wire would claim
    for name, role in (("stdin", "reads its requests from"), ("stdout", "answers on")):
        if getattr(sys, name) is None:
            raise AtlasError(name, f"closed: the MCP server {role} it (start it from an MCP client)")
    server = build_server(root)
    if not hasattr(server, "_lowlevel_server"):  # an SDK whose server is built otherwise: its own reader
        server.run("stdio")
        return
    anyio.run(_serve_stdio, server)


async def _serve_stdio(server: Any) -> None:
    import anyio
    from mcp import types
    from mcp.server.stdio import stdio_server

    from kernel_atlas.core.rpc_lines import INVALID_REQUEST, PARSE_ERROR, BoundedLines, Refused, Wire

    def screen(text: str) -> str:
        """The message with credential-shaped texts redacted (the SDK echoes an unknown method or
        tool name), also those spelled with JSON escapes; then the SDK's own parse, its refusal
        said without the text; then a tool call's arguments against the tool's parameters."""
        from pydantic import ValidationError

        text = redact_text(text)
        if "\\" in text:  # `ghp\u005f…`, `https:\/\/u:pw@…`: what the text does not show, the SDK decodes
            text = _redacted_json(text)
        try:
            message = types.jsonrpc_message_adapter.validate_json(text, by_name=False)
        except ValidationError as exc:
            invalid = [error["msg"] for error in exc.errors(include_input=False) if error["type"] == "json_invalid"]
            if invalid:
                raise Refused(PARSE_ERROR, invalid[0]) from None
            raise Refused(INVALID_REQUEST, "not a JSON-RPC request, notification or response") from None
        # an id that is no number or text: the SDK takes the request for a notification and never answers
        if isinstance(message, types.JSONRPCNotification) and '"id"' in text and "id" in json.loads(text):
            raise Refused(INVALID_REQUEST, "its id is neither a number nor a text")
        if isinstance(message, types.JSONRPCRequest) and message.method == "tools/call":
            _check_arguments(server, message.params, message.id)
        return text

    wire_in, wire_out = _claimed_stdio()
    wire = Wire(wire_out)
    lines = BoundedLines(wire_in, screen, wire.answer)
    async with stdio_server(stdin=anyio.wrap_file(lines), stdout=anyio.wrap_file(wire)) as (read, write):  # type: ignore[arg-type]
        lowlevel = server._lowlevel_server
        await lowlevel.run(read, write, lowlevel.create_initialization_options())


def _redacted_json(text: str) -> str:
    """A JSON message with the credentials its decoded texts hold redacted (written again,
    compact), else as it is; one that does not decode is the SDK's to refuse."""
    from kernel_atlas.core.redact import redact_document

    try:
        message = json.loads(text)
    except (ValueError, RecursionError):
        return text
    redacted = redact_document(message)
    return text if redacted is message else json.dumps(redacted)


def _check_arguments(server: Any, params: Any, request: Any) -> None:
    """A `tools/call`'s arguments validated as the SDK will validate them, its refusal said in one
    line without the values (the SDK's is pydantic's four lines echoing each value given): a
    JSON-RPC invalid-params error, as MCP answers a call it cannot make."""
    from pydantic import ValidationError

    from kernel_atlas.core.rpc_lines import INVALID_PARAMS, Refused

    name = params.get("name") if isinstance(params, dict) else None
    arguments = params.get("arguments") if isinstance(params, dict) else None
    manager = getattr(server, "_tool_manager", None)
    tool = manager.get_tool(name) if manager is not None and isinstance(name, str) else None
    if tool is None or not isinstance(arguments, dict | None):
        return  # an unknown tool or a malformed call: the SDK says so
    try:
        tool.fn_metadata.validate_arguments(arguments or {})
    except ValidationError as exc:
        errors = exc.errors(include_input=False, include_url=False, include_context=False)
        first = errors[0]
        where = ".".join(str(part) for part in first["loc"]) or "arguments"
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        problem = redact_text(f"tool {name}: argument {where}: {first['msg']}{more}")
        raise Refused(INVALID_PARAMS, " ".join(problem.split()), request) from None
    except Exception:  # whatever else the SDK's validation raises, it answers itself
        return


def _claimed_stdio() -> tuple[Any, Any]:
    """The wire's reader and writer on private copies of fds 0 and 1, which then read the null
    device and write to stderr (as the SDK claims them when it opens the streams itself): a
    process forked for a bounded answer neither reads the wire nor writes stray output onto it."""
    wire_in, wire_out = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDONLY)
    try:
        os.dup2(null, 0)
    finally:
        os.close(null)
    os.dup2(2, 1)
    return os.fdopen(wire_in, "rb", closefd=False), os.fdopen(wire_out, "wb", closefd=False)
