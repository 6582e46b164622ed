"""Files of an output folder, written and read safely.

- A file is written whole or not at all: into a dotted temporary file in the same folder, then
  renamed over its name (`atomic_file`). A run killed half-way leaves the previous file or none,
  never half of one, and a rename replaces a symbolic link planted at that name instead of
  writing through it (the temporary file is created exclusively, so it never follows one either).
- One writer per folder at a time (`folder_lock`): a second `atlas` command that would write the
  same folder fails at once with a one-line message instead of mixing its files with the first's.
- A file read back (`read_json`) must be a regular file of sane size: a FIFO or a device planted
  in its place neither blocks nor fills the memory.

Errors are `AtlasError`s naming the path and the problem (one line, exit code 2).
"""

from __future__ import annotations

import errno
import json
import math
import os
import re
import shutil
import stat
import sys
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import IO, Any

from kernel_atlas.core.errors import AtlasError

try:  # POSIX; elsewhere folders are not locked
    import fcntl
except ImportError:  # pragma: no cover
    fcntl = None  # type: ignore[assignment]

LOCK_NAME = ".atlas.lock"
JSON_LIMIT = 1 << 30  # a summary of 100,000 ranks is ~500 MB; anything larger is not ours
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


def os_problem(exc: OSError) -> str:
    """An OS error in words, without the path (the message names it once, first)."""
    if exc.errno == errno.ENAMETOOLONG:
        return "path too long"
    if exc.errno in (errno.EACCES, errno.EPERM):
        return "permission denied"
    if exc.errno == errno.EROFS:
        return "read-only file system"
    if exc.errno == errno.ENOSPC:
        return "no space left on the device"
    if exc.errno == errno.ELOOP:
        return "symbolic link loop (or a link where a file was expected)"
    return exc.strerror or type(exc).__name__


NAME_BYTES = 255  # the longest file name Linux file systems take (NAME_MAX), in bytes


def cut_to_bytes(text: str, limit: int) -> str:
    """`text` cut to at most `limit` bytes as the file system counts them (UTF-8), never in the
    middle of a character: a name cut to 180 characters was 720 bytes of CJK, past NAME_BYTES."""
    raw = os.fsencode(text)
    if len(raw) <= limit:
        return text
    return raw[:limit].decode("utf-8", "ignore")


def _temporary_name(name: str) -> str:
    # dotted (readers skip it), unique, and short enough for any file system's name limit
    return f".{cut_to_bytes(name, 180)}.{uuid.uuid4().hex[:12]}.tmp"


# what `_temporary_name` makes: a writer's temporary file, left where it was killed mid-write
TEMPORARY_NAME = re.compile(r"^\..*\.[0-9a-f]{12}\.tmp$", re.DOTALL)
# a folder whose permission bits forbid writing, said to a writer (`folder_lock`, `-o`)
READ_ONLY = "read-only (its permission bits forbid writing, root's too): make it writable or use another folder"


@contextmanager
def atomic_file(path: str | Path, mode: str = "wb") -> Iterator[IO[Any]]:
    """Write `path` whole or not at all: a handle on a new temporary file beside it, renamed
    over `path` when the block ends without an exception (removed otherwise). A `path` that is
    (or links to) a character device or a FIFO — /dev/stdout, /dev/null, a pipe — is written
    straight into instead: a rename would replace the device node itself. A block device is
    refused."""
    path = Path(path)
    if not path.name:
        raise AtlasError(path, "not a file name")
    special = _special_file(path)
    if special:
        with _straight_into(path, mode) as handle:
            yield handle
        return
    temporary = path.parent / _temporary_name(path.name)
    try:
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC, 0o666)
    except OSError as exc:
        raise AtlasError(path, f"cannot write: {os_problem(exc)}") from None
    try:
        text = "b" not in mode
        with os.fdopen(fd, mode, **({"encoding": "utf-8", "newline": ""} if text else {})) as handle:
            yield handle
        if path.is_dir() and not path.is_symlink():
            raise AtlasError(path, "cannot write: a folder has this name")
        os.replace(temporary, path)
    except OSError as exc:
        with suppress(OSError):
            os.unlink(temporary)
        raise AtlasError(path, f"cannot write: {os_problem(exc)}") from None
    except BaseException:
        with suppress(OSError):
            os.unlink(temporary)
        raise


def _special_file(path: Path) -> bool:
    """Whether `path` (its links followed) is a character device or a FIFO; raises for a block
    device (a disk: never written) and a socket."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return False  # missing, or a dangling link: the rename makes the file
    if stat.S_ISBLK(mode):
        raise AtlasError(path, "is a block device: refusing to write to it")
    if stat.S_ISSOCK(mode):
        raise AtlasError(path, "is a socket: cannot write a file there")
    return stat.S_ISCHR(mode) or stat.S_ISFIFO(mode)


@contextmanager
def _straight_into(path: Path, mode: str) -> Iterator[IO[Any]]:
    """A handle writing into a device or FIFO; a FIFO nobody reads fails at once (no wait)."""
    try:
        fd = os.open(path, os.O_WRONLY | _NONBLOCK | _CLOEXEC)
        os.set_blocking(fd, True)  # non-blocking only to open: writes wait for the reader
    except OSError as exc:
        why = "a FIFO nobody reads" if exc.errno == errno.ENXIO else os_problem(exc)
        raise AtlasError(path, f"cannot write: {why}") from None
    try:
        text = "b" not in mode
        with os.fdopen(fd, mode, **({"encoding": "utf-8", "newline": ""} if text else {})) as handle:
            yield handle
    except OSError as exc:
        raise AtlasError(path, f"cannot write: {os_problem(exc)}") from None


def write_text(path: str | Path, text: str) -> Path:
    with atomic_file(path, "w") as handle:
        handle.write(text)
    return Path(path)


def write_bytes(path: str | Path, parts: Iterable[bytes]) -> Path:
    """`parts` written one after the other as they come (never joined), atomically as `write_text`."""
    with atomic_file(path, "wb") as handle:
        for part in parts:
            handle.write(part)
    return Path(path)


def remove(path: str | Path) -> None:
    """Remove a file, a folder (with its contents) or a link (never what it points to)."""
    path = Path(path)
    try:
        if path.is_symlink() or not path.is_dir():
            path.unlink(missing_ok=True)
        else:
            shutil.rmtree(path)
    except OSError as exc:
        raise AtlasError(path, f"cannot remove the previous run's file: {os_problem(exc)}") from None


def check_utf8(path: str | Path) -> None:
    """Refuse, in one line, a path whose bytes are not UTF-8 (legal on Linux; Python holds such
    bytes as lone surrogates): Arrow opens no such path, and no Parquet or JSON text can hold it."""
    text = str(path)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raw = os.fsencode(text)
        try:  # UTF-8 bytes that an ASCII locale could not decode: the locale is the problem
            shown = raw.decode("utf-8")
            problem = (
                f"a UTF-8 name, but the locale's encoding is {sys.getfilesystemencoding()}: set a UTF-8 locale "
                "(LC_ALL=C.UTF-8) to pass non-ASCII names"
            )
        except UnicodeDecodeError:
            shown = text.encode("utf-8", "backslashreplace").decode("utf-8")
            problem = "not valid UTF-8 (bytes of another encoding?): Parquet and JSON hold only UTF-8 text"
        raise AtlasError(shown, problem) from None


def unusable_argument(value: Any) -> tuple[Any, str] | None:
    """The first item of an argument (a value, or a list or tuple of them) that a command or an
    agent's tool refuses before any work, with why: "text" for a text or path that is no Unicode
    (bytes of another encoding on a command line, a lone surrogate from an agent; `check_utf8`
    words it for a path), "number" for a float that is not finite (`--fail-above inf` judged
    nothing, with numpy warnings). None when every item is usable."""
    for item in value if isinstance(value, list | tuple) else [value]:
        if isinstance(item, str | Path):
            try:
                str(item).encode("utf-8")
            except UnicodeEncodeError:
                return item, "text"
        elif isinstance(item, float) and not math.isfinite(item):
            return item, "number"
    return None


def why_missing(path: str | Path) -> str:
    """Why a path that does not exist does not: a link loop or a dangling link are said as such."""
    path = Path(path)
    try:
        path.stat()
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "symbolic link loop"
        if path.is_symlink():
            return f"broken symbolic link (to {os.readlink(path)}, which does not exist)"
        if exc.errno not in (errno.ENOENT, errno.ENOTDIR):
            return os_problem(exc)
    return "no such file"


def is_writable_folder(folder: str | Path) -> bool:
    """Whether new files can be made in `folder`. A folder whose permission bits forbid writing
    counts as read-only even for root (it says: do not write here, e.g. a shared traces folder)."""
    try:
        mode = os.stat(folder).st_mode
    except OSError:
        return False
    return stat.S_ISDIR(mode) and bool(mode & 0o222) and os.access(folder, os.W_OK | os.X_OK)


def _holders(fd: int) -> str:
    """The processes holding a lock on the file open as `fd`, as the kernel lists them
    (/proc/locks), in words — " (pid N)" —, else "": a pid written into the lock file named
    the last writer, long gone, when a reader (which wrote none) held the folder, or the writer
    before when the one holding it had not written its own yet."""
    try:
        held = os.fstat(fd)
        with open("/proc/locks", encoding="ascii", errors="replace") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return ""
    # `N: FLOCK  ADVISORY  WRITE PID MAJ:MIN:INODE 0 EOF` (a waiter's line has `->` after `N:`)
    on_inode: dict[int, bool] = {}
    for line in lines:
        fields = line.split()
        if len(fields) < 6 or fields[1] != "FLOCK" or not fields[4].isdigit():
            continue
        where = fields[5].split(":")
        if len(where) != 3 or not where[2].isdigit() or int(where[2]) != held.st_ino or int(fields[4]) <= 0:
            continue
        try:
            same_device = (int(where[0], 16), int(where[1], 16)) == (os.major(held.st_dev), os.minor(held.st_dev))
        except ValueError:
            continue
        on_inode[int(fields[4])] = on_inode.get(int(fields[4]), False) or same_device
    # the device as stat gives it differs from the one the kernel lists on some file systems
    # (overlayfs): the inode alone is taken there, only where no entry matches both
    pids = sorted(pid for pid, same in on_inode.items() if same) or sorted(on_inode)
    if not pids:
        return ""
    return f" (pid {pids[0]})" if len(pids) == 1 else f" (pids {', '.join(map(str, pids))})"


@contextmanager
def folder_lock(folder: str | Path, shared: bool = False) -> Iterator[None]:
    """Hold `folder` for the block: exclusively for a writer, shared for a reader. A writer
    meeting any other holder, or a reader meeting a writer, fails at once, naming the holders
    the kernel knows (`_holders`). A folder whose permission bits forbid writing is read-only
    for every user, root too (`is_writable_folder`, the rule `--html` and `-o` files follow): a
    writer is refused there, and a reader reads it without a lock where it holds no lock file
    (it had made one in a mode-555 run folder), as on read-only media."""
    folder = Path(folder)
    if fcntl is None:  # pragma: no cover
        yield
        return
    path = folder / LOCK_NAME
    if folder.is_dir() and not is_writable_folder(folder):
        if not shared:
            raise AtlasError(folder, READ_ONLY)
        if not os.path.lexists(path):
            yield
            return
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | _NOFOLLOW | _CLOEXEC, 0o666)
    except OSError as exc:
        if shared and exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
            yield
            return
        if exc.errno == errno.ELOOP:
            raise AtlasError(path, "is a symbolic link: not followed (remove it)") from None
        if exc.errno == errno.EISDIR:
            raise AtlasError(
                path, "is a folder where the lock file belongs: remove it (atlas makes the file itself)"
            ) from None
        if shared:  # a reader writes nothing: said as what it could not do
            raise AtlasError(path, f"cannot open the folder's lock file: {os_problem(exc)}") from None
        raise AtlasError(folder, f"cannot write here: {os_problem(exc)}") from None
    try:
        try:
            fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
        except BlockingIOError:
            doing = "being written" if shared else "in use"
            raise AtlasError(
                folder,
                f"{doing} by another atlas command{_holders(fd)}: wait for it to finish, or use another folder",
            ) from None
        if not _still_linked(path, fd):  # the lock was removed with its folder meanwhile
            raise AtlasError(folder, "in use by another atlas command, which removed it: run again")
        yield
    finally:
        os.close(fd)


def _still_linked(path: Path, fd: int) -> bool:
    """Whether `path` still names the file open as `fd`: a lock taken on a file another command
    unlinked (with its folder) between our open and our lock holds nothing."""
    try:
        named, held = os.stat(path, follow_symlinks=False), os.fstat(fd)
    except OSError:
        return False
    return (named.st_dev, named.st_ino) == (held.st_dev, held.st_ino)


def read_bytes(path: str | Path, limit: int = JSON_LIMIT) -> bytes:
    """The bytes of a regular file of at most `limit` bytes (never blocks on a FIFO or a device)."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | _NONBLOCK | _CLOEXEC)
    except FileNotFoundError:
        raise AtlasError(path, "no such file") from None
    except OSError as exc:
        raise AtlasError(path, f"cannot read: {os_problem(exc)}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise AtlasError(path, "not a regular file")
        if info.st_size > limit:
            raise AtlasError(path, f"too large ({info.st_size:,} bytes)")
        with os.fdopen(fd, "rb", closefd=False) as handle:
            # what the file holds (read(limit) reserves `limit` bytes first: 1 GiB, past a
            # `ulimit -v`), then a chunk at a time should it have grown since
            chunks, total = [], 0
            while total <= limit:
                chunk = handle.read(min(limit + 1 - total, max(info.st_size - total, 0) + (1 << 16)))
                if not chunk:
                    break
                chunks.append(chunk)
                total += len(chunk)
            return b"".join(chunks)[:limit]
    except OSError as exc:
        raise AtlasError(path, f"cannot read: {os_problem(exc)}") from None
    finally:
        os.close(fd)


def _not_json(constant: str) -> Any:
    """Python's json reads NaN, Infinity and -Infinity, which JSON has not (nor writes Kernel Atlas)."""
    raise ValueError(f"{constant} is not a JSON value")


def read_json(path: str | Path, limit: int = JSON_LIMIT, nan_ok: bool = False) -> Any:
    """A JSON document from a regular file; not-JSON, too deep or not UTF-8 is a one-line error.
    NaN and ±Infinity are not JSON: refused, unless `nan_ok` (a user's file that Python's json
    wrote, which writes them; Kernel Atlas's own files never hold them)."""
    data = read_bytes(path, limit)
    try:
        text = data.decode("utf-8-sig")
        del data  # the bytes are not held while the document is built from the text
        return json.loads(text, parse_constant=None if nan_ok else _not_json)
    except (ValueError, UnicodeDecodeError) as exc:
        raise AtlasError(path, f"not valid JSON ({str(exc).splitlines()[0][:120]})") from None
    except RecursionError:
        raise AtlasError(path, "not valid JSON (nested too deeply)") from None
