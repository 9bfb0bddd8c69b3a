"""The store guard's audit hook, in every Python process the test session starts.

`tests/store_guard/__init__.py` puts this directory first on the `PYTHONPATH` of the session, so each
Python subprocess imports this module at start-up (Python's `sitecustomize`) and, while
`PHAZEC_STORE_GUARD` names a record file, notes there every SQLite file it opens (an MLflow store is
one): the test running (`PYTEST_CURRENT_TEST`, which pytest sets in the environment the process
inherited) and the file's absolute path, one line each, tab-separated. Nothing else is changed: the
process opens the file as asked. A process started outside the session (the user's `phazec` in
another terminal) has no `PHAZEC_STORE_GUARD` and notes nothing.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

RECORD = "PHAZEC_STORE_GUARD"
"""The environment variable naming the record file (absent: the hook notes nothing)."""
IGNORED = (".mlflow-huey-store",)
"""Endings of SQLite files that are no store: an MLflow server's task queues, in a temporary directory
of their own."""
seen: set[str] = set()
"""Paths this process has noted already (a store is opened many times)."""


def audit(event: str, args: tuple[Any, ...]) -> None:
    """Note a SQLite file this process opens (`sqlite3.connect`, Python's audit event)."""
    if event != "sqlite3.connect" or RECORD not in os.environ:
        return
    database = os.fsdecode(args[0]) if args and isinstance(args[0], (str, bytes, os.PathLike)) else ""
    if database in ("", ":memory:") or database.startswith("file:") or database.endswith(IGNORED):
        return
    path = str(Path(database).resolve())
    if path in seen:
        return
    seen.add(path)
    test = os.environ.get("PYTEST_CURRENT_TEST", "(no test running)").rsplit(" (", 1)[0]
    with Path(os.environ[RECORD]).open("a", encoding="utf-8") as record:
        record.write(f"{test}\t{path}\n")


def install() -> None:
    """Add `audit` to this process's audit hooks (once; an audit hook cannot be removed)."""
    if not getattr(sys, "_phazec_store_guard", False):
        sys.addaudithook(audit)
        sys._phazec_store_guard = True  # type: ignore[attr-defined]


if RECORD in os.environ:
    install()
