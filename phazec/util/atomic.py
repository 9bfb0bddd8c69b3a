"""Atomic, durable file writes: a reader sees the old file or the new one, never a torn or empty one.

The data goes to a temporary file beside the target, is fsynced, and is renamed into place; the
directory is then fsynced so the rename itself survives a power loss. The file gets the permissions
any new file of the user gets (0666 less the umask), not mkstemp's 0600.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

from phazec.errors import PhazecError


class Figure(Protocol):
    """Anything that saves itself like a matplotlib Figure."""

    def savefig(self, fname: Any, *, format: str, dpi: float) -> None:
        """Write the figure to a file object."""


def umask() -> int:
    """The process's umask, read without changing it (Linux), else by setting and restoring it once."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except OSError:
        pass
    old = os.umask(0o022)
    os.umask(old)
    return old


def write_bytes(path: Path, data: bytes) -> None:
    """Write `data` to a fsynced temporary file beside `path`, then rename it into place.

    Raises:
        OSError: the write failed (a full disk, a directory in the way); its `filename` is `path`.
    """
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as err:
        raise OSError(err.errno, err.strerror, str(path)) from err
    try:
        os.fchmod(fd, 0o666 & ~umask())
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        Path(tmp).replace(path)
    except BaseException as err:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(err, OSError):
            raise OSError(err.errno, err.strerror, str(path)) from err
        raise
    fsync_dir(path.parent)


@contextlib.contextmanager
def after(saved: Path) -> Iterator[None]:
    """Writes that follow `saved`, which already holds the whole result: a write failing in the block (a
    full disk, a directory in the way) ends as one paragraph naming what was saved and what was not."""
    try:
        yield
    except OSError as err:
        raise PhazecError(
            f"{saved} was saved, with the whole result, but writing {err.filename or 'a later file'} failed "
            f"({err.strerror or err}); make room (or move what is in the way) and rerun the same command: it "
            "resumes from its cache and writes every file."
        ) from err


def fsync_dir(directory: Path) -> None:
    """Make a rename in `directory` durable (a no-op where directories cannot be opened)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_json(path: Path, data: Any) -> None:
    """Write `data` as indented, key-sorted JSON, atomically."""
    write_bytes(path, (json.dumps(data, indent=2, sort_keys=True) + "\n").encode())


def write_png(path: Path, figure: Figure, dpi: float) -> Path:
    """Render `figure` as PNG in memory and write it atomically; returns `path`."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=dpi)
    write_bytes(path, buffer.getvalue())
    return path


def writable_dir(path: Path, what: str) -> None:
    """`path` is (or can be made) a directory this process can create files in."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as err:
        raise PhazecError(
            f"{what} {str(path)!r} is not a writable directory ({err.strerror or err}); give a directory "
            "you can write to."
        ) from None
