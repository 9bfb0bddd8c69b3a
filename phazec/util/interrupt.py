"""Clean stops on SIGINT (Ctrl-C) and SIGTERM: saved batches kept, workers stopped, exit 130 or 143.

While a command runs, both signals raise `Interrupted` in the main thread. It unwinds through the
search (the worker pool stops its processes on the way out, `phazec.search.executors.local`), Hydra
records the job as failed, tracking ends its MLflow run KILLED, and the command prints `MESSAGE` and
exits with 128 plus the signal number. Every batch saved before the signal stays saved, so running the same
command again resumes.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Iterator
from types import FrameType
from typing import NoReturn

MESSAGE = "interrupted; rerun the same command to resume"
SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(Exception):  # noqa: N818 (a signal, not an error)
    """The command received SIGINT or SIGTERM (an Exception, so Hydra records the job as failed)."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"{MESSAGE} (signal {signal.Signals(signum).name})")
        self.signum = signum

    def __reduce__(self) -> tuple[type[Interrupted], tuple[int]]:
        """Pickled by its signal, so a worker's interrupt (Gurobi catches a terminal's Ctrl-C in a
        worker too) reaches the parent whole."""
        return Interrupted, (self.signum,)

    @property
    def exit_status(self) -> int:
        """The shell's convention: 128 plus the signal number (130 for SIGINT, 143 for SIGTERM)."""
        return 128 + self.signum


RECEIVED: list[int] = []
"""Every signal `interruptible`'s handler has raised, in order (see `interruptible`)."""


def _raise(signum: int, frame: FrameType | None) -> NoReturn:
    RECEIVED.append(signum)
    raise Interrupted(signum)


EXITED: list[int] = []
"""Every signal `outside_jobs`' handler has taken, in order (see `ends_as_signalled`)."""


def _exit(signum: int, frame: FrameType | None) -> NoReturn:
    EXITED.append(signum)
    print(f"phazec: {MESSAGE}", file=sys.stderr)
    raise SystemExit(128 + signum)


def outside_jobs() -> None:
    """From now on, SIGINT and SIGTERM outside `interruptible` (while the commands are imported, the
    command line is checked and composed, Hydra starts or ends a job) print the one line and exit 130
    or 143. A `SystemExit`, which neither Hydra nor a library's `except Exception` takes for an error
    to report; no worker process runs outside a job. A signal the process was started ignoring (a
    shell's background job ignores SIGINT) stays ignored. Called by the console scripts
    (`phazec.launch`) before anything else is imported."""
    for s in SIGNALS:
        if signal.getsignal(s) is not signal.SIG_IGN:
            signal.signal(s, _exit)


@contextlib.contextmanager
def ends_as_signalled() -> Iterator[None]:
    """Around a command's whole run: a signal taken outside a job (`outside_jobs`) whose exit a library
    replaced with an error of its own still ends the command as the signal, with the one line last
    and 130 or 143. A SIGTERM while Hydra composed the config raised the exit inside OmegaConf, whose
    `finally` then raised an AttributeError on the node the exit left half built; Hydra reported it
    and exited 1, which became exit 2 (CI of this stop)."""
    before = len(EXITED)
    try:
        yield
    except BaseException as err:
        if len(EXITED) == before:
            raise
        status = 128 + EXITED[before]
        if isinstance(err, SystemExit) and err.code == status:
            raise
        print(f"phazec: {MESSAGE}", file=sys.stderr)
        raise SystemExit(status) from None


@contextlib.contextmanager
def held_by_the_system() -> Iterator[None]:
    """Block SIGINT and SIGTERM for the block, so the system holds one that arrives until the block
    ends, when it is handled. For importing the commands: a handler's exception raised inside a
    compiled module's initialisation (highspy's) comes out as that module's `ImportError`, and an
    optional import's `except ImportError` would even swallow it. The imports take a second or two."""
    old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, set(SIGNALS))
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)


@contextlib.contextmanager
def interruptible() -> Iterator[None]:
    """Within the block, SIGINT and SIGTERM raise `Interrupted`; the old handlers come back after. An
    error that leaves the block after a signal arrived in it is that signal's `Interrupted`: a library
    may put an error of its own in place of the one raised inside it (OmegaConf re-creates an
    exception from its type and a message, which `Interrupted` does not take)."""
    old = {s: signal.signal(s, _raise) for s in SIGNALS}
    before = len(RECEIVED)
    try:
        yield
    except KeyboardInterrupt as err:  # a SIGINT that arrived before the handler was installed
        raise Interrupted(signal.SIGINT) from err
    except Interrupted:
        raise
    except Exception as err:
        if len(RECEIVED) > before:
            raise Interrupted(RECEIVED[before]) from err
        raise
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """Hold SIGINT and SIGTERM for the block, for work a signal must not cut midway: handing a new
    worker process its start-up data (cut, the worker prints a traceback). Within `interruptible`, a
    signal received in the block raises `Interrupted` when the block ends. A process started in the
    block begins with SIGINT blocked, so a terminal's Ctrl-C, which reaches the whole process group,
    cannot end it with a traceback before it ignores SIGINT itself."""
    old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    hold = threading.current_thread() is threading.main_thread() and all(
        signal.getsignal(s) is _raise for s in SIGNALS
    )
    held: list[int] = []
    if hold:
        for s in SIGNALS:
            signal.signal(s, lambda signum, frame: held.append(signum))
    try:
        yield
    finally:
        if hold:
            for s in SIGNALS:
                signal.signal(s, _raise)
        signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)
    if held:
        raise Interrupted(held[0])


def exit_interrupted(error: Interrupted) -> NoReturn:
    """Print the one line and exit with the signal's status."""
    print(f"phazec: {MESSAGE}", file=sys.stderr)
    sys.exit(error.exit_status)
