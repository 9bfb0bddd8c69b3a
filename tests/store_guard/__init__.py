"""The suite's store guard: every MLflow store a test opens lies in the session's temporary directory.

A plugin (`pytest_plugins` in tests/conftest.py; `-p tests.store_guard` elsewhere). For the whole
session it sets `PHAZEC_STORE_GUARD` to a record file and puts `sitecustomize.py` beside this file
first on `PYTHONPATH`, so that the pytest process and every Python process a test starts note each
SQLite file they open (an MLflow store is one: `phazec.db`), with the test that opened it. When the
session ends, a file outside the session's temporary directory (`--basetemp`, where each test's
`tmp_path` lies) fails it, naming the test and the file: a test tracked into the user's
`./phazec.db`, or any store but its own. What the guard checks is what the tests did, not the state
of the user's files: the user's own `phazec` in the same checkout meanwhile does not concern it.
For the session's subprocesses this `sitecustomize` stands in for any other on the path (a venv has
none; Debian's system Python has one, for crash reports). Under pytest-xdist (`make test` runs two
workers) each worker checks its own tests' stores and hands what it found to the controller, which
reports it and fails the session.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.store_guard.sitecustomize import RECORD, install

HERE = Path(__file__).resolve().parent
"""The directory of `sitecustomize.py`, which every Python process of the session imports."""
GUARD_KEY = pytest.StashKey[tuple[Path, Path]]()
"""The session's temporary directory and the record file."""


@pytest.fixture(scope="session", autouse=True)
def store_guard(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[None]:
    """Note, for the whole session, every SQLite file its processes open (see the module)."""
    basetemp = tmp_path_factory.getbasetemp().resolve()
    record = basetemp / "stores-opened.tsv"
    record.touch()
    request.config.stash[GUARD_KEY] = (basetemp, record)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(RECORD, str(record))
        paths = [str(HERE), *filter(None, [os.environ.get("PYTHONPATH")])]
        patch.setenv("PYTHONPATH", os.pathsep.join(paths))
        install()
        yield


def stores_outside(basetemp: Path, record: Path) -> list[tuple[str, str]]:
    """(test, path) of each SQLite file noted in `record` that lies outside `basetemp`."""
    noted = (line.split("\t", 1) for line in record.read_text(encoding="utf-8").splitlines())
    return sorted({(test, path) for test, path in noted if not Path(path).resolve().is_relative_to(basetemp)})


WORKER_KEY = "phazec_stores_outside"
"""The key of `workeroutput` under which a pytest-xdist worker hands its findings to the controller."""
FOUND_KEY = pytest.StashKey[list[tuple[str, str, str]]]()
"""In pytest-xdist's controller: (worker's temporary directory, test, path) its workers found."""


def findings(session: pytest.Session) -> list[tuple[str, str, str]]:
    """(temporary directory, test, path) of each store opened outside it: this process's, and under
    pytest-xdist, in the controller, its workers' (`pytest_testnodedown`)."""
    found = [*session.config.stash.get(FOUND_KEY, [])]
    if GUARD_KEY in session.config.stash:  # a test ran here
        basetemp, record = session.config.stash[GUARD_KEY]
        found += [(str(basetemp), test, path) for test, path in stores_outside(basetemp, record)]
    return found


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    """pytest-xdist's controller, as each worker ends: keep what it found (its `pytest_sessionfinish`)."""
    found = [(str(b), str(t), str(p)) for b, t, p in getattr(node, "workeroutput", {}).get(WORKER_KEY, [])]
    node.config.stash[FOUND_KEY] = [*node.config.stash.get(FOUND_KEY, []), *found]


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Fail the session if a test opened a store outside the session's temporary directory. A
    pytest-xdist worker hands what it found to the controller, which reports it."""
    found = findings(session)
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput[WORKER_KEY] = found
        return
    if not found:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        for basetemp in sorted({b for b, _, _ in found}):
            reporter.write("\n")
            reporter.write_line(
                f"ERROR: tests opened an MLflow store outside the session's temporary directory {basetemp}"
                " (a test tracks into its own tmp_path, or not at all):",
                red=True,
            )
            for _, test, path in sorted(f for f in found if f[0] == basetemp):
                reporter.write_line(f"  {test}: {path}", red=True)
    session.exitstatus = pytest.ExitCode.TESTS_FAILED
