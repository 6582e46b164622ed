"""`atlas`: the command line. Only wiring: parse options, call library functions, print."""

from __future__ import annotations

import contextlib
import inspect
import json
import os
import signal
import sys
from collections.abc import Callable
from functools import wraps
from pathlib import Path
from typing import Annotated, Any, TypeVar

from kernel_atlas import process_life

process_life.begin()  # before the libraries below load: they read what it sets

import typer  # noqa: E402
from rich.console import Console  # noqa: E402

from kernel_atlas.core import signals  # noqa: E402
from kernel_atlas.core.errors import OUT_OF_MEMORY, AtlasError, subject_and_problem, system_refusal  # noqa: E402
from kernel_atlas.process_life import READER_GONE, leave, stdout_to_null, stop_workers  # noqa: E402
from kernel_atlas.report.console import ReaderGone, terminal, write_stdout  # noqa: E402

app = typer.Typer(
    name="atlas",
    help="Kernel Atlas: where a PyTorch model's GPU time goes, kernel by kernel, and how far each "
    "kernel is from the hardware limit. Start with `atlas ingest TRACE.json.gz`.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        from kernel_atlas import __version__

        write_stdout(f"atlas {__version__}\n")
        raise typer.Exit()


@app.callback()
def _options(
    version: Annotated[
        bool,
        typer.Option("--version", "-V", callback=_version, is_eager=True, help="Print the version and exit."),
    ] = False,
) -> None:
    """Kernel Atlas: where a PyTorch model's GPU time goes, kernel by kernel, and how far each
    kernel is from the hardware limit. Start with `atlas ingest TRACE.json.gz`."""


# consoles never narrower than 40 cells, writing what the locale cannot encode with substitutes,
# on streams that fail in one line (report/console.py)
console = terminal("stdout")
err_console = terminal("stderr")

F = TypeVar("F", bound=Callable[..., Any])
Wide = Annotated[bool, typer.Option("--wide", help="Full kernel names and shapes, every column, however wide.")]


def _jobs(help_text: str) -> Any:
    """A command's `-j/--jobs` option (how many processes; None when not given)."""
    return typer.Option("-j", "--jobs", min=1, help=help_text)


def say(console: Console, label: str, message: object, redact: bool = True, wrapped: bool = False) -> None:
    """One line: our markup `label`, then `message` shown literally (escaped, on one line — or,
    `wrapped`, folded to the console's width — and unless `redact` is off anything shaped like a
    credential redacted: messages quote trace content)."""
    from kernel_atlas.core.redact import redact_text
    from kernel_atlas.report.markup import esc

    text = esc(redact_text(str(message)) if redact else str(message))
    console.print(f"{label} {text}" if label else text, highlight=False, soft_wrap=not wrapped)


def _screen_arguments(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """Refused before any work (`unusable_argument`): paths and texts on the command line whose
    bytes are not UTF-8, and numbers that are not finite."""
    from kernel_atlas.core.safe_files import check_utf8, unusable_argument

    for name, value in [*(("", value) for value in args), *kwargs.items()]:
        found = unusable_argument(value)
        if found is None:
            continue
        item, why = found
        if why == "text":
            check_utf8(item)  # raises, naming the path as it can be shown
        flag = f"--{name.replace('_', '-')} " if name else ""
        raise AtlasError(None, f"{flag}{item}: not a finite number")


def _leave_out_of_memory() -> None:
    """The `atlas` command ends now, exit 2, its one line said: without the C libraries' exit
    handlers (Arrow's allocator faulted in its own under `ulimit -v`), and with nothing that needs
    memory if even ending tidily fails for want of it (a MemoryError inside `leave` became a
    SystemError out of typer, then the same fault). A caller's library use goes on."""
    try:  # noqa: SIM105 - no context manager object to make, out of memory
        leave(2, always=True)
    except BaseException:
        pass
    if process_life.SCRIPT:
        os._exit(2)


def _error_line(text: str) -> None:
    """`error: TEXT` (a text of ours, never the input's) on stderr — written directly where the
    console cannot be had for want of memory."""
    try:
        say(err_console, "[bold red]error:[/]", text, redact=False)
    except Exception:
        with contextlib.suppress(OSError):
            os.write(2, f"error: {text}\n".encode("ascii", "replace"))


_later: list[tuple[str, str, bool]] = []  # (markup, text, wrapped) said once the command succeeds (`_say_later`)


def _say_later(markup: str, text: str, wrapped: bool = False) -> None:
    """A warning or note, said on stderr when the command ends — unless it fails: then its one
    error line is all it says (a warning about a trace beside "cannot write" was two lines).
    `wrapped`: folded to the terminal's width (beside tables fitted to it), else one line."""
    _later.append((markup, text, wrapped))


def _say_what_waited(said: bool) -> None:
    waiting = list(_later)
    _later.clear()
    for markup, text, wrapped in waiting if said else ():
        say(err_console, markup, text, wrapped=wrapped)


def _one_line_errors(func: F) -> F:
    """Bad input → one line naming the file and the problem, exit code 2, no traceback."""

    @wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if signal.getsignal(signal.SIGINT) is process_life.interrupted_quietly:  # loaded: Ctrl-C says "interrupted"
            signal.signal(signal.SIGINT, signals.interrupt)  # KeyboardInterrupt, recorded: `signals.received`
        try:
            # what saying an error needs, loaded first: a command that ran out of file
            # descriptors (`ulimit -n`) or memory could not import it then
            import kernel_atlas.core.redact
            import kernel_atlas.report.markup  # noqa: F401

            _screen_arguments(args, kwargs)
            _later.clear()
            try:
                done = func(*args, **kwargs)
            except BaseException as exc:
                failed = not isinstance(exc, typer.Exit) or exc.exit_code in (2, 130, 143)
                if not isinstance(exc, typer.Exit) or exc.exit_code:
                    stop_workers()  # a failed command's workers still starting would say so themselves
                _say_what_waited(said=not failed)  # a command's own exit code (diff's 3) is no failure
                if isinstance(exc, Exception):  # a library's own error for a signal (DuckDB's "Query interrupted"):
                    signals.reraise_if_signalled(exc)  # the signal's, ended below as it ends
                raise
            _say_what_waited(said=True)
            return done
        except typer.Exit:  # a command's own exit code
            raise
        except ReaderGone:  # `| head` read what it wanted: quiet, as any Unix tool ends there
            stdout_to_null()
            raise typer.Exit(READER_GONE) from None
        except AtlasError as exc:
            from kernel_atlas.core.redact import redacted_error

            # the file and the problem redacted apart: `/etc/passwd` then `: listed …` is no `passwd: x`
            say(err_console, "[bold red]error:[/]", redacted_error(exc), redact=False)
            raise typer.Exit(2) from None
        except KeyboardInterrupt:
            err_console.print("interrupted")
            leave(130)
            raise typer.Exit(130) from None
        except SystemExit as exc:  # SIGTERM (`process_life.terminate_as_exit`)
            if exc.code == 143:
                leave(143)
            raise
        except Exception as exc:
            if os.environ.get("ATLAS_DEBUG"):
                raise
            refusal = system_refusal(exc)
            if refusal:  # exit 2, not 3: `diff --fail-above` says "regressed" with 3
                _error_line(refusal)
                if refusal == OUT_OF_MEMORY:
                    _leave_out_of_memory()
                raise typer.Exit(2) from None
            if isinstance(exc, OSError) and exc.filename is not None:  # the user's file system said no
                from kernel_atlas.core.safe_files import os_problem

                say(err_console, "[bold red]error:[/]", f"{exc.filename}: {os_problem(exc)}")
                raise typer.Exit(2) from None
            say(
                err_console,
                "[bold red]internal error:[/]",
                f"{type(exc).__name__}: {exc} (set ATLAS_DEBUG=1 for a traceback)",
            )
            raise typer.Exit(1) from None

    return wrapper  # type: ignore[return-value]


@app.command()
@_one_line_errors
def ingest(
    traces: Annotated[
        list[str],
        typer.Argument(
            help="Trace files (.json, .json.gz, .json.zst; Nsight Systems .sqlite, .nsys-rep), folders of them, "
            "globs or fsspec URLs (s3://bucket/run/*.json.gz); several = one per rank."
        ),
    ],
    out: Annotated[
        str | None,
        typer.Option("-o", "--out", help="Output folder or fsspec URL (default: <first-trace-stem>.atlas next to it)."),
    ] = None,
    jobs: Annotated[
        int | None,
        _jobs(
            "Traces processed in parallel (default on this machine: every CPU for several traces of under "
            "48 MB of JSON each, else 1 — a large trace's decode uses every CPU itself; every CPU on Ray)."
        ),
    ] = None,
    engine: Annotated[
        str, typer.Option(help="local: this machine's processes; ray: one Ray task per trace.")
    ] = "local",
    address: Annotated[
        str | None,
        typer.Option(help="Ray cluster to join: auto or ray://HOST:PORT (default: a local Ray started for the run)."),
    ] = None,
    top: Annotated[int, typer.Option(min=1, max=1_000_000, help="Kernels shown in the summary table.")] = 10,
    quiet: Annotated[bool, typer.Option("-q", "--quiet", help="Only print the output directory.")] = False,
    capture: Annotated[
        list[Path] | None,
        typer.Option(
            "--capture",
            help="A profiled CUDA/HIP-graph capture or a directory of them (repeat for several, e.g. one per "
            "batch size): graph-replayed kernels get launcher, shapes and stack from the captured graph they match.",
        ),
    ] = None,
    wide: Wide = False,
) -> None:
    """Parse traces into the kernels dataset kernels.parquet/rank=N/ (one row per GPU
    kernel/memcpy/memset, linked to its launch, CPU op, shapes, call stack, module and step),
    catalog.json and summary.json. A trace that fails is reported and the others complete
    (exit code 2 when any failed)."""
    from kernel_atlas.ingest.workers import local_jobs, start_early

    given = [Path(t) for t in traces]
    if engine == "local" and jobs is None and len(given) > 1 and all(p.is_file() for p in given):
        jobs = local_jobs(given)
    if engine == "local":  # decode processes boot, and the first trace is read, while the pipeline is imported
        start_early(given, jobs or 1)
    from kernel_atlas.ingest.fleet import expand_sources, ingest_fleet, named_first, output_for
    from kernel_atlas.report.terminal import print_ingest_summary, progress

    if address is not None and engine != "ray":
        raise AtlasError(None, "--address needs --engine ray")
    catalogs: list[str] = []
    sources = expand_sources(traces, catalogs)
    if catalogs:
        shown = named_first([os.path.basename(c) for c in catalogs])
        left_out = f"{len(catalogs)} kernel catalog(s) in the input folders left out, not traces: {shown}"
        _say_later("[yellow]note:[/]", left_out)
    if out is not None:
        _not_inside_an_input(out, traces)
    if engine == "local" and jobs is None:  # folders and globs: known once expanded
        jobs = local_jobs([Path(s) for s in sources])
    out_dir = out
    if out_dir is None:
        out_dir, note = output_for(sources[0], sources=sources)  # a fallback folder is theirs alone
        if note:
            _say_later("[yellow]note:[/]", note)
    with progress(err_console, [Path(s) for s in sources], disable=quiet) as (on_done, on_progress):
        result = ingest_fleet(
            sources,
            out_dir,
            engine=engine,
            jobs=jobs,
            address=address,
            captures=capture or (),
            on_done=on_done,
            on_progress=on_progress,
        )
    for warning in result.warnings:
        _say_later("[yellow]warning:[/]", warning)
    if result.failed:
        line = _failures_line(result.failed, len(sources), out_dir, bool(result.done))
        say(err_console, "[bold red]error:[/]", line, redact=False)  # each reason redacted apart
    if not result.done:
        raise typer.Exit(2)
    if quiet:
        say(console, "", out_dir)
    else:
        print_ingest_summary(console, result, result.files, top=top, wide=wide)
    if result.failed:
        raise typer.Exit(2)


SHOWN_FAILURES = 3  # failed traces named in the one error line; summary.json lists every one


def _failures_line(failed: list[Any], sources: int, out_dir: object, any_done: bool) -> str:
    """The one error line of an ingest where traces failed: a trace that failed alone, its own
    reason; several, how many and the first SHOWN_FAILURES reasons (summary.json lists all)."""
    from kernel_atlas.core.redact import redact_text

    reasons = [_reason(failure) for failure in failed]
    out_dir = redact_text(str(out_dir))
    if len(reasons) == 1:
        return reasons[0] + (f" (1 of {sources} traces failed; the others are in {out_dir})" if any_done else "")
    where = f"; the others are in {out_dir}, whose summary.json lists every failure" if any_done else ""
    shown = "; ".join(reasons[:SHOWN_FAILURES])
    more = f"; and {len(reasons) - SHOWN_FAILURES} more" if len(reasons) > SHOWN_FAILURES else ""
    return f"{len(reasons)} of {sources} traces failed{where}: {shown}{more}"


def _reason(failure: Any) -> str:
    """A failed trace's reason, `TRACE: PROBLEM`, redacted with the trace and the problem apart
    (`redact.redacted_error`); the rest of the line is ours."""
    from kernel_atlas.core.redact import redact_message

    # another file named (an output, a catalog), or none: the reason redacted as one text
    return redact_message(*subject_and_problem(failure.source, failure.reason))


@app.command()
@_one_line_errors
def classify(
    catalog: Annotated[Path, typer.Argument(help="A kernel catalog in the seed's format (JSON list).")],
    out: Annotated[
        Path | None, typer.Option("-o", "--out", help="Write the filled catalog here (default, or `-`: stdout).")
    ] = None,
) -> None:
    """Fill the TBD/empty op_mapping entries of a catalog, keep existing labels, add category,
    operation and the provenance of every new label."""
    from kernel_atlas.classify.classifier import load_catalog
    from kernel_atlas.classify.fill import fill_catalog
    from kernel_atlas.classify.taxonomy import UNKNOWN_OP
    from kernel_atlas.store.outputs import check_named_output, json_list_parts

    if out is not None and str(out) == "-":  # stdout, as the convention goes (a file named `-` was written)
        out = None
    if out is not None:
        check_named_output(out, "-o", reads=[catalog])
    entries = load_catalog(catalog)
    notes: list[str] = []
    filled = fill_catalog(entries, notes=notes)
    for note in notes:
        _say_later("[yellow]warning:[/]", f"{catalog}: {note}")
    newly = sum(1 for a, b in zip(entries, filled, strict=True) if a.get("op_mapping") != b["op_mapping"])
    unknown = sum(1 for e in filled if e["op_mapping"] == UNKNOWN_OP)
    del entries
    parts = json_list_parts(filled)  # the same JSON as every output: no credential, no NaN/Infinity
    if out is None:
        for part in parts:
            write_stdout(part.decode())
        return
    from kernel_atlas.core.safe_files import write_bytes

    write_bytes(out, parts)  # encoded a part at a time: a large catalog is never held as text
    say(err_console, "", f"{len(filled)} entries, {newly} newly labelled, {unknown} unknown → {out}")


EXPLAIN_SECONDS = 30.0  # the most `atlas explain` may spend trying every rule on one name


@app.command()
@_one_line_errors
def explain(
    kernel_name: Annotated[str, typer.Argument(help="The GPU kernel name as the trace shows it.")],
    launcher: Annotated[str | None, typer.Option("--launcher", "-l", help="Launching CPU op, e.g. aten::mm.")] = None,
    stack: Annotated[
        list[str] | None, typer.Option("--stack", "-s", help="A call-stack frame (repeat, innermost first).")
    ] = None,
    all_steps: Annotated[bool, typer.Option("--all", help="Show every rule, not only up to the first match.")] = False,
    wide: Wide = False,
) -> None:
    """Show the label of a kernel: what its name and its launcher say, who wins when they
    disagree (the resolution table of rules.toml), context refinements, and the name rules tried."""
    from kernel_atlas.classify.classifier import default_classifier
    from kernel_atlas.classify.names import base_name, family_key
    from kernel_atlas.core.redact import redact_text
    from kernel_atlas.core.texts import time_bound
    from kernel_atlas.ingest.frames import STACK_SEPARATOR
    from kernel_atlas.report.explain import print_explanation

    # a credential pasted with the name is never printed back (the rules see the same text)
    kernel_name, launcher = redact_text(kernel_name), launcher and redact_text(launcher)
    stack = [redact_text(frame) for frame in stack] if stack else None
    call_stack = STACK_SEPARATOR.join(stack) if stack else None
    with time_bound("atlas explain", EXPLAIN_SECONDS):  # every rule is tried on the name: bounded
        explanation = default_classifier().explain(kernel_name, launcher, call_stack)
    print_explanation(
        console, kernel_name, base_name(kernel_name), family_key(kernel_name), explanation, all_steps, wide
    )


def _not_inside_an_input(out: str, traces: list[str]) -> None:
    """Refuse an output folder that is an input folder or lies inside one: the outputs would mix
    with the traces, and the next `atlas ingest DIR -o DIR` refused the folder (its traces then
    lay inside an output folder)."""
    from kernel_atlas.store.outputs import is_url

    if is_url(out):
        return
    target = Path(os.path.realpath(out))
    for source in traces:
        folder = Path(source.removeprefix("file://"))
        if is_url(source) or not folder.is_dir():
            continue
        inside = Path(os.path.realpath(folder))
        if target == inside or inside in target.parents:
            raise AtlasError("-o", f"{out} is inside the input folder {source}: the outputs would mix with its traces")


def _typed_command() -> str:
    """`atlas COMMAND` as typed, where click's error names no context (a missing option value)."""
    typed = sys.argv[1] if len(sys.argv) > 1 else ""
    commands = app.registered_commands  # typer names a command after its function, `_` as `-`
    names = {command.name or command.callback.__name__.replace("_", "-") for command in commands if command.callback}
    return f"atlas {typed}" if typed in names else "atlas"


def main() -> None:
    """The `atlas` command: the app, with a usage error (an unknown option or command, a value
    out of range) said in one line as other bad input is — click's own is a box of five lines."""
    try:
        from typer._click import exceptions as usage  # typer carries its own click since 0.25
    except ImportError:  # pragma: no cover - an older typer, on click
        from click import exceptions as usage  # type: ignore[no-redef]

    process_life.SCRIPT = True
    process_life.terminate_as_exit()
    try:
        os.getcwd()
    except OSError:  # a relative path would mean nothing
        say(err_console, "[bold red]error:[/]", "the current folder no longer exists: cd to one that does")
        raise SystemExit(2) from None
    try:
        code = app(standalone_mode=False, prog_name="atlas")
    except usage.NoArgsIsHelpError as exc:  # `atlas`, `atlas report`: their help (typer printed it)
        if exc.format_message().strip():  # click's plain help, where typer's own did not print it
            exc.show()
        missing = "no command given" if exc.ctx.parent is None else "its arguments are missing"
        say(err_console, "[bold red]error:[/]", f"{missing} (see {exc.ctx.command_path} --help)")
        code = 2
    except usage.ClickException as exc:
        ctx = getattr(exc, "ctx", None)
        message = " ".join(exc.format_message().split())
        where = ctx.command_path if ctx else _typed_command()
        say(err_console, "[bold red]error:[/]", f"{message} (see {where} --help)")
        code = exc.exit_code
    except typer.Abort:
        err_console.print("interrupted")
        code = 130
    except ReaderGone:  # `atlas -V | true`: the version written after its reader left (an eager option)
        stdout_to_null()
        code = READER_GONE
    except SystemExit as exc:  # rich ends a `--help` whose reader left with exit 1: that reader's quiet 141
        if not isinstance(exc.__context__, BrokenPipeError):
            raise
        stdout_to_null()
        code = READER_GONE
    except (MemoryError, SystemError) as exc:  # out of memory where no handler of ours could run
        if system_refusal(exc) != OUT_OF_MEMORY:  # another SystemError: a fault, as it is
            raise
        _error_line(OUT_OF_MEMORY)  # not said yet: where `_one_line_errors` said it, the process ended
        _leave_out_of_memory()
        code = 2
    if isinstance(code, int) and code != 0:  # a failed command with workers: not held up by them
        leave(code)
    raise SystemExit(code if isinstance(code, int) else 0)


@app.command()
@_one_line_errors
def report(
    source: Annotated[
        Path,
        typer.Argument(
            help="An `atlas ingest` output directory, a trace file (ingested first), or a kernel catalog "
            "(a JSON list of entries with `kernel_name`: the costs of every entry at its example shapes, "
            "written to CATALOG.costs.csv beside it)."
        ),
    ],
    device: Annotated[
        str | None,
        typer.Option(
            "--device",
            "-d",
            help="Peaks to use, e.g. h100-sxm, h200, mi300x (default: the traced GPU). "
            "Another GPU's peaks project the traced times onto it.",
        ),
    ] = None,
    html: Annotated[
        Path | None, typer.Option("--html", help="Write the interactive report here (default: OUT/report.html).")
    ] = None,
    top: Annotated[int, typer.Option(min=1, max=1_000_000, help="Rows in the terminal tables.")] = 12,
    kernel_wait_us: Annotated[
        float,
        typer.Option(
            "--kernel-wait-us",
            min=0.0,
            help="Idle gaps shorter than this that are not host waits count as kernel waits.",
        ),
    ] = 30.0,
    short_kernel_us: Annotated[
        float,
        typer.Option("--short-kernel-us", min=0.0, help="Kernels shorter than this can be part of a graph candidate."),
    ] = 20.0,
    like_hta: Annotated[
        bool,
        typer.Option(
            "--like-hta",
            help="Idle breakdown (idle.parquet, the table) with HTA's conventions (timestamps rounded to µs, "
            "last ProfilerStep dropped), the exact one in idle_exact.parquet. Without it, HTA's numbers are in "
            "idle_hta.parquet. The critical path is then read as HTA 0.5.0 reads the trace (docs/critical_path.md).",
        ),
    ] = False,
    wide: Wide = False,
    jobs: Annotated[
        int | None,
        _jobs(
            "Ranks analysed in parallel (multi-rank runs; default: every CPU when each rank has at most "
            "100,000 GPU activities, else 1, so that one large rank at a time is in memory)."
        ),
    ] = None,
    full: Annotated[
        bool, typer.Option("--full", help="Every section of the terminal report in full (the default is brief).")
    ] = False,
    section: Annotated[
        list[str] | None,
        typer.Option(
            "--section",
            help="Print only this section, in full (repeat for several): trust, device, busy, efficiency, findings, "
            "critical_path, categories, headroom, costs, waits, ranks, memory, files.",
        ),
    ] = None,
    window: Annotated[
        str | None,
        typer.Option(
            "--window",
            help="Critical path of the K-th (from 0) range named like NAME only, e.g. ProfilerStep#1 "
            "(default: the whole trace).",
        ),
    ] = None,
    overlay: Annotated[
        Path | None,
        typer.Option("--overlay", help="Write the trace with its critical path flagged here, to open in Perfetto."),
    ] = None,
) -> None:
    """Where the GPU time goes and how far each kernel is from the roofline, and why the GPU
    waits: writes roofline.parquet, timeshare.csv, steps.parquet, idle.parquet,
    idle_hta.parquet, idle_causes.parquet, launch_stats.parquet, graph_candidates.parquet,
    critical_path.parquet (what bounds the run), report.json and report.html next to
    kernels.parquet; memory.parquet where the trace recorded memory events; for several ranks
    also collectives.parquet (skew and wait per rank per collective) and the stragglers."""
    from kernel_atlas.ingest.reader import is_catalog_file
    from kernel_atlas.report.build import build_report
    from kernel_atlas.report.terminal import print_catalog_costs, print_report

    if source.is_file() and source.suffix.lower() == ".json" and is_catalog_file(source):
        # a kernel catalog: costs of every entry at its example shapes, written next to it
        from kernel_atlas.classify.classifier import load_catalog
        from kernel_atlas.core.devices import get_device
        from kernel_atlas.roofline.catalog import catalog_costs
        from kernel_atlas.store.outputs import check_named_output, write_csv

        target = source.with_name(source.stem + ".costs.csv")
        check_named_output(target, "the costs file", reads=[source])
        table = catalog_costs(load_catalog(source), get_device(device or "h100-sxm"))
        write_csv(table, target)
        print_catalog_costs(console, table, device or "h100-sxm", target, top=top, wide=wide)
        return
    from kernel_atlas.store.outputs import check_named_output

    for option, target in (("--html", html), ("--overlay", overlay)):
        if target is not None:  # before the work: neither may replace the trace or a run's own file
            own = source / "report.html" if option == "--html" and source.is_dir() else None
            check_named_output(target, option, reads=[source], own=own)
    trace = None
    if not source.is_dir():  # a trace: ingested first, as `atlas ingest TRACE` would
        from kernel_atlas.ingest.fleet import ingest_one

        trace = source
        source, warnings = ingest_one(source)
        for warning in warnings:
            _say_later("[yellow]warning:[/]", warning)
    if section:
        from kernel_atlas.report.terminal import SECTION_NAMES

        unknown = sorted(set(section) - set(SECTION_NAMES))
        if unknown:  # before the work, not after it
            raise AtlasError("--section", f"no section {', '.join(unknown)} (sections: {', '.join(SECTION_NAMES)})")
    from kernel_atlas.core.heap import collect_cycles_rarely, keep_freed_memory

    keep_freed_memory()  # this process ends with the report: its analyses reuse the pages they free
    if Path(source).is_dir():  # not where a trace is ingested first: see `heap.collect_cycles_rarely`
        collect_cycles_rarely()
    result = build_report(
        source,
        device,
        html,
        kernel_wait_us,
        short_kernel_us,
        like_hta,
        jobs=jobs,
        window=window,
        overlay=overlay,
        trace=trace,
    )
    print_report(console, result, top=top, wide=wide, full=full, sections=section)


@app.command()
@_one_line_errors
def whatif(
    source: Annotated[
        Path, typer.Argument(help="An `atlas ingest` output directory (after `atlas report` for roofline).")
    ],
    speedup: Annotated[
        list[str] | None,
        typer.Option(
            "--speedup",
            help="FIELD=VALUE:Nx or FIELD=VALUE:roofline; FIELD: op, category, kernel (regex), module, launcher. "
            "Repeatable.",
        ),
    ] = None,
    no_launch_gaps: Annotated[
        bool, typer.Option("--no-launch-gaps", help="Remove launch and kernel-to-kernel overheads.")
    ] = False,
    window: Annotated[str | None, typer.Option("--window", help="NAME#K: only the K-th range named like NAME.")] = None,
    rank: Annotated[
        int | None,
        typer.Option(
            "--rank",
            help="Solve this rank alone (default: all ranks joined at their collectives once "
            "`atlas report` has matched them, else the first).",
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
) -> None:
    """Re-solve the critical path with some GPU work faster: the new end-to-end time and the
    saving (writes OUT/whatif.json)."""
    from kernel_atlas.analysis.whatif import run_whatif
    from kernel_atlas.core.redact import redact_document
    from kernel_atlas.report.critical_view import print_whatif

    # the folder's faults first: a missing one had been told "nothing to change" (no --speedup), a
    # trace "no such ingest output folder" though the file is right there (campaign BJ 4)
    if source.is_file():
        from kernel_atlas.ingest.fleet import TRACE_SUFFIXES
        from kernel_atlas.ingest.reader import NOT_A_TRACE_BUT_CATALOG, is_catalog_file

        if is_catalog_file(source):
            raise AtlasError(source, NOT_A_TRACE_BUT_CATALOG)
        what = "a trace" if source.name.lower().endswith(TRACE_SUFFIXES) else "a file"
        raise AtlasError(
            source,
            f"{what}, not an ingest output folder: `atlas ingest` it and `atlas report` the output first, "
            "then give that folder",
        )
    if not source.exists():
        raise AtlasError(source, "no such ingest output folder")
    # printed as whatif.json holds it: the changes quote the --speedup values as typed
    result = redact_document(run_whatif(source, speedup or [], no_launch_gaps, window, rank))
    for change in result.get("changes", []):  # a typo (`category=GEMM`) saved 0 µs unsaid
        if isinstance(change, dict) and change.get("activities") == 0:
            _say_later(
                "[yellow]warning:[/]",
                f"--speedup {change.get('change')!r} matches no GPU activity (values are matched exactly, "
                "case included; `kernel=` takes a regular expression)",
            )
    if as_json:
        import json

        console.print_json(json.dumps(result))
    else:
        print_whatif(console, result)


@app.command()
@_one_line_errors
def diff(
    a: Annotated[Path, typer.Argument(help="Run A, the baseline: a trace or an `atlas ingest` output.")],
    b: Annotated[Path, typer.Argument(help="Run B, compared with A: a trace or an `atlas ingest` output.")],
    out: Annotated[
        Path | None,
        typer.Option(
            "-o",
            "--out",
            help="Write the comparison table here, as its suffix says: .csv, .parquet or .json; nothing by default.",
        ),
    ] = None,
    html: Annotated[Path | None, typer.Option("--html", help="Also write an interactive page here.")] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the rows {level, key, a_us, b_us, delta_us} as JSON instead.")
    ] = False,
    fail_above: Annotated[
        float | None,
        typer.Option(
            "--fail-above",
            help="Exit with code 3 when B's total GPU time, a category or an op is more than PCT percent (0 or "
            "more) slower than in A (rows whose time in A and in B is under --min-share of A's GPU time are not "
            "judged).",
            metavar="PCT",
        ),
    ] = None,
    min_share: Annotated[
        float | None,
        typer.Option(
            "--min-share",
            help="With --fail-above: judge only categories and ops whose time in A or in B is at least this "
            "share (0 to 1) of A's GPU time.  [default: 0.01]",
            metavar="S",
        ),
    ] = None,
    markdown: Annotated[
        Path | None, typer.Option("--markdown", help="Write a summary a CI system can post (Markdown) here.")
    ] = None,
    per_step: Annotated[
        bool,
        typer.Option(
            "--per-step",
            help="Compare one profiler step of each run: each rank's GPU time inside its ProfilerSteps divided "
            "by its step count (time outside every step left out, said). Refused for a run without steps.",
        ),
    ] = False,
    top: Annotated[int, typer.Option(min=1, max=1_000_000, help="Rows in the terminal tables.")] = 10,
    wide: Wide = False,
) -> None:
    """Compare two runs: GPU time per category, op, nn.Module and kernel in A and B and the
    change; kernels matched by name, or by their CPU op and shapes when the names differ (two
    GPUs); appeared and vanished kernels; regressions ranked; how comparable the runs are.
    With `--fail-above PCT` it gates a CI job: exit code 3 when something regressed by more
    than PCT percent (named), 0 otherwise. Traces are ingested next to themselves; files are
    written only where asked (-o, --html, --markdown)."""
    from kernel_atlas.analysis.diff import TABLE_SUFFIXES, diff_runs, write_table
    from kernel_atlas.analysis.gate import MIN_SHARE, comparability, judge
    from kernel_atlas.report.diff_markdown import comparability_line, verdict_line, write_markdown
    from kernel_atlas.report.terminal import print_diff, print_gate
    from kernel_atlas.store.outputs import check_named_output

    if fail_above is not None and not fail_above >= 0.0:  # NaN and inf are refused before (not finite)
        raise AtlasError("--fail-above", f"{fail_above:g}: give a percentage of 0 or more")
    if min_share is not None and fail_above is None:  # it says what the gate judges: nothing to say it to
        raise AtlasError("--min-share", "only with --fail-above (it sets which rows the gate judges)")
    if min_share is not None and not 0.0 <= min_share <= 1.0:
        raise AtlasError("--min-share", f"{min_share:g}: give a share of A's GPU time from 0 to 1")
    named: dict[str, str] = {}  # each file named, by its real path: the first option naming it
    for option, target in (("-o", out), ("--html", html), ("--markdown", markdown)):
        if target is not None and str(target) == "-":
            raise AtlasError(option, "`-` is no file here: name a file (--json prints the rows on stdout)")
        if target is not None:  # before the work: none may replace a trace or a run's own file
            check_named_output(target, option, reads=[a, b])
            same = named.setdefault(os.path.realpath(target), option)
            if same != option:  # the second written over the first, exit 0
                raise AtlasError(option, f"{target} is also {same}'s file: name one file for each")
    if out is not None and out.suffix.lower() not in TABLE_SUFFIXES:  # a CSV named .parquet had been written
        raise AtlasError("-o", f"{out}: name a .csv, .parquet or .json file (the suffix says what is written)")
    notes: list[str] = []  # what ingesting a trace here says, as `atlas report TRACE` says it
    result = diff_runs(a, b, per_step, notes)
    said = set(result.a.warnings + result.b.warnings)  # an ingest's warnings: said below, by side
    for note in notes:
        if note not in said:
            _say_later("[yellow]warning:[/]", note)
    for name, side in (("A", result.a), ("B", result.b)):  # what ingest could not read changes the comparison
        if side.warnings:
            more = f" ({len(side.warnings)} ingest warnings: summary.json)" if len(side.warnings) > 1 else ""
            _say_later("[yellow]warning:[/]", f"{name} ({side.label}): {side.warnings[0]}{more}", wrapped=True)
    totals = (result.a.gpu_time_us, result.b.gpu_time_us, result.a.gpus, result.b.gpus)
    windows = (result.a.window, result.b.window)
    share = MIN_SHARE if min_share is None else min_share
    calls = (result.a.activities, result.b.activities)  # the share at shapes both runs record
    verdict = judge(result.table, *totals, fail_above, share, *windows, calls) if fail_above is not None else None
    comp = verdict.comparability if verdict is not None else comparability(result.table, *totals[2:], *windows, calls)
    files: dict[str, Path] = {}
    if out is not None:
        files["table"] = write_table(result.table, out)
    if html is not None:
        from kernel_atlas.report.html import write_diff_html

        files["html"] = write_diff_html(result, html, comparability_line(comp))
    if markdown is not None:
        files["markdown"] = write_markdown(result, verdict, comp, markdown, top=top)
    if as_json:
        write_stdout(json.dumps(result.rows(), indent=1) + "\n")
        if files:
            say(err_console, "", "wrote " + ", ".join(str(p) for p in files.values()))
    else:
        print_diff(console, result, files, top=top, wide=wide)
    verdict_text = verdict_line(verdict) if verdict is not None else None
    print_gate(
        err_console if as_json else console, comparability_line(comp), verdict_text, bool(verdict and verdict.failed)
    )
    if verdict is not None and verdict.failed:
        raise typer.Exit(3)


@app.command()
@_one_line_errors
def mcp(
    root: Annotated[
        Path, typer.Option("--root", help="The folder whose run folders (ingest/report outputs) the tools may read.")
    ] = Path("."),
) -> None:
    """Serve the run folders under --root to agents over the Model Context Protocol (stdio):
    read-only tools runs, summary, top_kernels, findings, query (one DuckDB SELECT over the
    run's tables), tables, explain, diff and critical_path. Paths outside the root are refused;
    results have row limits. Needs the MCP SDK, the mcp extra of kernel-atlas."""
    try:
        import mcp.server.mcpserver  # noqa: F401
    except ImportError:
        raise AtlasError("atlas mcp", "needs the MCP SDK: pip install 'kernel-atlas[mcp]'") from None
    from kernel_atlas.mcp_server import serve

    serve(root)


@app.command()
@_one_line_errors
def dashboard(
    source: Annotated[Path, typer.Argument(help="An `atlas ingest` output directory, or a trace file.")],
    notebook: Annotated[str, typer.Option(help="dashboard, compare or replay.")] = "dashboard",
    html: Annotated[
        Path | None, typer.Option("--html", help="Run the notebook headless and write a static HTML page here.")
    ] = None,
    browser: Annotated[
        bool, typer.Option("--browser/--no-browser", help="Open a web browser on it (off: only print the URL).")
    ] = True,
    port: Annotated[
        int | None, typer.Option(min=1, max=65535, help="Port of the JupyterLab server (default: a free one).")
    ] = None,
    run_b: Annotated[
        Path | None,
        typer.Option(
            "--run-b",
            help="Run B of --notebook compare (an ingest output or a trace; default: $ATLAS_OUT_B or "
            "$ATLAS_TRACE_B). SOURCE is run A.",
        ),
    ] = None,
) -> None:
    """Open the notebook dashboard for a run in JupyterLab (filters, roofline, time share,
    timeline) until Ctrl-C, or with --html run it headless and save the result as one HTML page
    (its figures and tables work offline; its widgets — filters, kernel picker — load from the web).
    Relative paths in ATLAS_OUT_B / ATLAS_TRACE_B are read from the current directory."""
    from kernel_atlas.report.dashboard import resolve_source
    from kernel_atlas.report.markup import esc
    from kernel_atlas.report.notebooks import execute, notebook_path, open_in_jupyter, to_html
    from kernel_atlas.store.outputs import check_named_output, lock, open_output

    notebook_path(notebook)  # a notebook that is not shipped: said before the run is read
    if run_b is not None and notebook != "compare":
        raise AtlasError("--run-b", "only for --notebook compare (its run B)")
    if html is not None:
        check_named_output(html, "--html", reads=[source] + ([run_b] if run_b else []))
    notes: list[str] = []  # what ingesting a trace here says, as `atlas report TRACE` says it
    out_dir = resolve_source(source, notes=notes)
    with lock(out_dir, shared=True):
        open_output(out_dir)  # a damaged or unfinished output is one line here, not a failed notebook
    env = {"ATLAS_OUT": str(out_dir.resolve())}
    if notebook == "compare":
        # B as A: resolved here, from this directory (the notebook's kernel runs in notebooks/),
        # checked before the notebook runs; never the bundled example unsaid
        if run_b is None and not (os.environ.get("ATLAS_OUT_B") or os.environ.get("ATLAS_TRACE_B")):
            raise AtlasError("--notebook compare", "needs run B: --run-b OUT (or ATLAS_OUT_B / ATLAS_TRACE_B)")
        out_b = resolve_source(run_b, suffix="_B", notes=notes)
        with lock(out_b, shared=True):
            open_output(out_b)
        env["ATLAS_OUT_B"] = str(out_b.resolve())
    for note in notes:  # with the page written; before JupyterLab, which serves until Ctrl-C
        if html is None:
            say(err_console, "[yellow]warning:[/]", note)
        else:
            _say_later("[yellow]warning:[/]", note)
    if html is None:

        def announce(url: str) -> None:
            say(console, "", f"JupyterLab on {url}  (Ctrl-C stops it)", redact=False)  # our own token

        raise typer.Exit(open_in_jupyter(notebook, env, browser=browser, port=port, announce=announce))
    with console.status(esc(f"running notebooks/{notebook}.ipynb on {out_dir}")):
        executed = execute(notebook, env)
    to_html(executed, html, title=f"Kernel Atlas {notebook}: {out_dir.name}")
    say(console, "", f"wrote {html}")


@app.command()
@_one_line_errors
def replay(
    kernel: Annotated[str | None, typer.Option("--kernel", "-k", help="Kernel name or regular expression.")] = None,
    op: Annotated[str | None, typer.Option("--op", help="Only this op_mapping.")] = None,
    category: Annotated[str | None, typer.Option("--category", help="Only this category.")] = None,
    source: Annotated[
        Path | None, typer.Option("--from", help="An `atlas ingest` output (default: catalogs/kernels.json).")
    ] = None,
    catalog: Annotated[Path | None, typer.Option("--catalog", help="A seed-format catalog to replay from.")] = None,
    replay_all: Annotated[bool, typer.Option("--all", help="Replay everything replayable (with --from).")] = False,
    device: Annotated[str | None, typer.Option("--device", help="cuda or cpu (default: cuda when available).")] = None,
    shape: Annotated[int | None, typer.Option("--shape", help="Only the N-th matching shape (0-based).")] = None,
    all_shapes: Annotated[bool, typer.Option("--all-shapes", help="Every matching shape, not only the first.")] = False,
    scale: Annotated[
        float | None,
        typer.Option(
            help="Shrink dimensions ≥ 64 of library and Triton kernel replays by this factor (default: the "
            "recorded shapes on a GPU; on the CPU, as much as the Triton interpreter needs, stated in the output). "
            "ATen ops always run their recorded shapes, said in the output."
        ),
    ] = None,
    max_gib: Annotated[float, typer.Option("--max-gib", help="Refuse shapes whose inputs exceed this.")] = 16.0,
    seq_len: Annotated[
        int | None,
        typer.Option("--seq-len", min=1, help="KV length per request where a trace records only workspaces."),
    ] = None,
    batch: Annotated[
        int | None, typer.Option("--batch", min=1, max=1 << 20, help="Requests per call, likewise.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON list instead of a table.")] = False,
    wide: Wide = False,
) -> None:
    """Re-run kernels with their recorded shapes, dtypes, strides and scalars; check the timed
    launch's own output against a float64 or plain-torch reference, then time it (CUDA events
    with the L2 flushed, CUDA graphs for short kernels; wall clock on the CPU)."""
    from kernel_atlas.classify.names import display_name
    from kernel_atlas.core.paths import catalogs_dir
    from kernel_atlas.replay.runner import (
        check_device,
        default_device,
        replayed,
        save_replay,
        select,
        targets_from_catalog,
        targets_from_output,
    )
    from kernel_atlas.replay.runner import (
        replay_all as run_all,
    )
    from kernel_atlas.report.progress import progress_bar
    from kernel_atlas.report.terminal import print_replay
    from kernel_atlas.store.outputs import open_output

    device = check_device(device) if device else default_device()
    if scale is not None and not 0 < scale <= 1:
        raise AtlasError(None, f"--scale {scale:g}: give a factor in (0, 1]")
    if source is not None:
        run_id = open_output(source).run_id
        targets = targets_from_output(source)
    else:
        targets = targets_from_catalog(catalog or catalogs_dir() / "kernels.json")
    targets = select(targets, kernel, op, category)
    if not (replay_all or all_shapes or shape is not None):
        targets = targets[:1]
    elif shape is not None:
        if targets and shape >= len(targets):  # it had said "no kernel matches the filters"
            raise AtlasError(None, f"--shape {shape}: only {len(targets):,} shapes match (0–{len(targets) - 1:,})")
        targets = targets[shape : shape + 1]
    if not targets:
        raise AtlasError(source or catalog, "no kernel matches the filters")
    with progress_bar(err_console, f"replaying on {device}", total=len(targets), enabled=len(targets) > 1) as bar:
        results = run_all(
            targets,
            device,
            on_done=lambda result: bar.advance(detail=display_name(str(result.kernel))),
            scale=scale,
            max_gib=max_gib,
            seq_len=seq_len,
            batch=batch,
        )
    if source is not None and replay_all:
        save_replay(results, source, run_id)
    if as_json:
        write_stdout(results.to_json(orient="records", indent=1) + "\n")
        return
    print_replay(console, results, device, wide=wide)
    # the rows print_replay gives a scale column for (it is there only when one of them is)
    shrunk = results[(results["scale"] < 1) & replayed(results)]
    if len(shrunk):  # an explicit --scale had no line: the table showed the recorded shapes unqualified
        factors = ", ".join(f"{f:g}" for f in sorted(set(shrunk["scale"])))
        why = (
            "chosen automatically so that the Triton interpreter finishes on the CPU (--scale sets it; a GPU "
            "runs the recorded shapes)"
            if scale is None
            else f"as --scale {scale:g} asks"
        )
        console.print(
            f"{len(shrunk)} of {len(results)} replays ran with dimensions ≥ 64 scaled by {factors} (the scale "
            f"column), {why}; the shapes column shows the recorded shapes, and their times are of the smaller "
            f"problem (no ratio, TFLOP/s or GB/s)"
        )
    whole = results[(results["scale"] >= 1) & replayed(results) & results["cpu_op"].str.startswith("aten::", na=False)]
    if scale is not None and scale < 1 and len(whole):  # --scale 0.25 had been silently ignored for them
        column = " (the scale column says 1)" if len(shrunk) else ""  # no column where no row ran scaled
        console.print(
            f"--scale {scale:g} left {len(whole)} of {len(results)} replays at their recorded shapes: ATen ops "
            f"replay through their schema at the shapes the trace recorded{column}"
        )


def _unwrapped(text: str) -> str:
    """A docstring's paragraphs each on one line (rich wraps them to the terminal; the source's
    own line breaks made ragged lines in `--help`); a paragraph holding a list or indented lines
    is kept as written."""
    paragraphs = inspect.cleandoc(text).split("\n\n")
    kept = [
        p if any(line.startswith(("-", "*", " ")) for line in p.splitlines()) else " ".join(p.split())
        for p in paragraphs
    ]
    return "\n\n".join(kept)


for _command in app.registered_commands:  # before typer reads them, when the app first runs
    _doc = _command.help or (_command.callback.__doc__ if _command.callback else None)
    if _doc:
        _command.help = _unwrapped(_doc)


if __name__ == "__main__":  # `python -m kernel_atlas.cli`, as `atlas`
    main()
