"""The store guard (tests/store_guard) in sessions of its own: the user's `phazec` in the checkout
meanwhile leaves it quiet; a test tracking into the checkout's `./phazec.db` fails the session.

Each test starts a pytest session in a directory of its own (the "checkout") with the guard as its
one plugin, and a real `phazec` search on BERT-large and the single TPUv4 design (a few seconds once
the model is cached).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from tests.conftest import REPO
from tests.store_guard import HERE
from tests.store_guard.sitecustomize import RECORD

SEARCH = ["hw=tpuv4", "model=bert_large", "train.recompute=[false]", "train.microbatch=[8]",
          "system.hbm_gb=[32]"]  # fmt: skip
"""One design and one plan: a search of a few seconds once the model is cached."""
USER_TEST = '''
import time
from pathlib import Path

def test_waits_while_the_user_searches():
    """Stays in the session until the user's search is done (at most 5 minutes)."""
    for _ in range(3000):
        if Path("search-done").exists():
            return
        time.sleep(0.1)
    raise AssertionError("the user's search did not end")
'''
TRACKING_TEST = """
import subprocess
import sys

def test_tracks_into_the_checkout():
    command = [sys.executable, "-c", "from phazec.cli import main; main()", *{search}, "tracking=mlflow"]
    subprocess.run(command, check=True, capture_output=True, timeout=300)
"""


def session(checkout: Path, test: str, cache_dir: Path, *options: str) -> subprocess.Popen[str]:
    """A pytest session with the store guard in `checkout`, running `test` (its own module there), with
    pytest's `options`."""
    (checkout / "pytest.ini").write_text("[pytest]\n")
    (checkout / "test_inner.py").write_text(test)
    env = {**os.environ, "PYTHONPATH": str(REPO), "PHAZEC_CACHE_DIR": str(cache_dir)}
    command = [sys.executable, "-m", "pytest", "-p", "tests.store_guard", "-p", "no:cacheprovider",
               f"--basetemp={checkout / 'basetemp'}", *options, "test_inner.py"]  # fmt: skip
    out = subprocess.PIPE
    return subprocess.Popen(command, cwd=checkout, env=env, stdout=out, stderr=subprocess.STDOUT, text=True)


def test_the_users_search_in_the_checkout_leaves_the_guard_quiet(tmp_path: Path, cache_dir: Path) -> None:
    """While a guarded session runs, the user's `phazec` in the same directory (another process, not
    started by the session) writes `./phazec.db`; the session passes."""
    guarded = session(tmp_path, USER_TEST, cache_dir)
    time.sleep(1)  # the session is running (it waits for the search, whenever it starts)
    user = {k: v for k, v in os.environ.items() if k not in (RECORD, "PYTHONPATH", "PYTEST_CURRENT_TEST")}
    command = [sys.executable, "-c", "from phazec.cli import main; main()", *SEARCH, "tracking=mlflow"]
    searched = subprocess.run(
        command, cwd=tmp_path, env={**user, "PHAZEC_CACHE_DIR": str(cache_dir)},
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    (tmp_path / "search-done").touch()
    output, _ = guarded.communicate(timeout=300)
    assert searched.returncode == 0, searched.stderr
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'phazec.db'}")
    assert len(client.search_runs([e.experiment_id for e in client.search_experiments()])) == 1
    assert guarded.returncode == 0, output
    assert "1 passed" in output
    assert "MLflow store" not in output


@pytest.mark.parametrize("options", [(), ("-n", "2")], ids=["one-process", "xdist"])
def test_a_test_tracking_into_the_checkout_fails_the_session(
    tmp_path: Path, cache_dir: Path, options: tuple[str, ...]
) -> None:
    """A test whose search tracks into `./phazec.db` of the session's directory fails the session,
    which names the test and the store: in one process, and under pytest-xdist (as `make test` runs),
    where a worker finds it and the controller reports it."""
    guarded = session(tmp_path, TRACKING_TEST.format(search=SEARCH), cache_dir, *options)
    output, _ = guarded.communicate(timeout=300)
    assert guarded.returncode == pytest.ExitCode.TESTS_FAILED, output
    assert "1 passed" in output
    assert "ERROR: tests opened an MLflow store outside the session's temporary directory" in output
    assert f"test_inner.py::test_tracks_into_the_checkout: {tmp_path / 'phazec.db'}" in output


def test_the_guard_is_on_for_this_session() -> None:
    """This session's processes note their stores: the guard's directory leads `PYTHONPATH`."""
    assert os.environ[RECORD]
    assert os.environ["PYTHONPATH"].split(os.pathsep)[0] == str(HERE)
