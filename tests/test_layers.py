"""The house's layers, checked as `make lint` checks them: the import contracts of pyproject.toml
hold on the package as it is, and each one breaks on a deliberately wrong import.

The contracts are import-linter's own classes, read from pyproject.toml, run on grimp's graph of the
package's real imports; a wrong import is added to a copy of that graph. The compiled core's rule is
ruff's banned-api (grimp does not see a compiled module), checked on a file ruff reads from stdin.
"""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path

import grimp
import pytest
from importlinter.api import read_configuration
from importlinter.contracts.acyclic_siblings import AcyclicSiblingsContract
from importlinter.contracts.forbidden import ForbiddenContract
from importlinter.contracts.layers import LayersContract
from importlinter.domain.contract import Contract

ROOT = Path(__file__).resolve().parents[1]
TYPES: dict[str, type[Contract]] = {
    "layers": LayersContract,
    "forbidden": ForbiddenContract,
    "acyclic_siblings": AcyclicSiblingsContract,
}


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    """The package's imports, external packages included (nothing cached on disk)."""
    return grimp.build_graph("phazec", include_external_packages=True, cache_dir=None)


def contracts() -> dict[str, Contract]:
    """pyproject.toml's contracts by id."""
    config = read_configuration(str(ROOT / "pyproject.toml"))
    return {
        options["id"]: TYPES[options["type"]](options["name"], config["session_options"], options)
        for options in config["contracts_options"]
    }


def test_the_house_keeps_every_contract(graph: grimp.ImportGraph) -> None:
    found = contracts()
    assert set(found) == {"floors", "acyclic", "settings"}
    for name, contract in found.items():
        assert contract.check(copy.deepcopy(graph), verbose=False).kept, name


@pytest.mark.parametrize(
    ("contract", "importer", "imported"),
    [
        ("floors", "phazec.ir.verify", "phazec.solvers.core"),  # the IR reaching for the compiled core
        ("floors", "phazec.hw.device", "phazec.passes.attention"),  # a floor up, as it once did
        ("floors", "phazec.predict.plan_report", "phazec.commands.setup"),  # the model into a command
        ("floors", "phazec.passes.fuse", "phazec.solvers.schedule.problem"),  # two rooms of one floor
        ("acyclic", "phazec.search.loop", "phazec.search.strategies.wham"),  # the circle there was
        ("settings", "phazec.predict.evaluator", "omegaconf"),  # the composed config below a command
        ("settings", "phazec.commands.search", "hydra"),  # a command reading Hydra's config itself
    ],
)
def test_a_wrong_import_breaks_its_contract(
    graph: grimp.ImportGraph, contract: str, importer: str, imported: str
) -> None:
    wrong = copy.deepcopy(graph)
    wrong.add_import(importer=importer, imported=imported, line_number=1, line_contents=f"import {imported}")
    assert not contracts()[contract].check(wrong, verbose=False).kept


@pytest.mark.parametrize(
    ("path", "allowed"), [("phazec/solvers/core.py", True), ("phazec/solvers/placement/dp.py", False)]
)
def test_the_compiled_core_is_imported_by_its_wrapper_alone(path: str, allowed: bool) -> None:
    config = str(ROOT / "pyproject.toml")
    done = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--config", config, "--select", "TID251",
         "--stdin-filename", path, "-"],
        input="from phazec import _core\n\nprint(_core)\n",
        capture_output=True, text=True, check=False, cwd=ROOT,
    )  # fmt: skip
    assert (done.returncode == 0) == allowed, done.stdout
    assert allowed or "imported by phazec.solvers.core alone" in done.stdout
