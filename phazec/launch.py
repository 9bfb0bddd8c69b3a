"""The console scripts `phazec`, `phazec-ir` and `phazec-plan`: interrupts handled from the first import.

Importing the commands (Hydra, MLflow, matplotlib, the exporter's torch) takes seconds, and a Ctrl-C
or SIGTERM in that time ended in a KeyboardInterrupt traceback, or with no word at all. These entry
points install `phazec.util.interrupt.outside_jobs` first, then import `phazec.cli` with the signals
held until the import ends (`held_by_the_system`): a signal at any moment prints one line and exits 130
or 143 (inside a job, `phazec.util.interrupt.interruptible` stops the search cleanly and says the same).
"""

from __future__ import annotations

import importlib

from phazec.util.interrupt import held_by_the_system, outside_jobs


def _run(entry: str) -> None:
    """Install the interrupt handling, then import the commands and run `phazec.cli.<entry>`."""
    outside_jobs()
    with held_by_the_system():
        cli = importlib.import_module("phazec.cli")
    getattr(cli, entry)()


def main() -> None:
    """`phazec` (`phazec.cli.main`)."""
    _run("main")


def ir_main() -> None:
    """`phazec-ir` (`phazec.cli.ir_main`)."""
    _run("ir_main")


def plan_main() -> None:
    """`phazec-plan` (`phazec.cli.plan_main`)."""
    _run("plan_main")
