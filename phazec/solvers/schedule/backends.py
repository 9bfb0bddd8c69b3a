"""Solve a mixed-integer program with Gurobi (gurobipy) or HiGHS (highspy).

`auto` tries Gurobi and falls back to HiGHS, with one log line saying why, when gurobipy is
missing, the licence file is bad (errno 10009) or the model is too large for the size-limited
licence (errno 10010). Both backends run single-threaded with a fixed seed unless configured
otherwise, so a solve is repeatable bit for bit.
"""

import functools
import logging
import math
import os
import signal
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import highspy
import numpy as np

from phazec.errors import PhazecError
from phazec.solvers.schema import SolverConfig
from phazec.util.interrupt import Interrupted

logger = logging.getLogger(__name__)

BACKENDS = ("auto", "gurobi", "highs")
INT_FEAS_TOL = 1e-9
"""Integrality tolerance: a binary off by this much relaxes a big-M row by at most 1e-6 units."""
_GUROBI_FALLBACK_ERRNOS = {
    10009: "its licence file is missing or invalid",
    10010: "the model is too large for its size-limited licence",
}


@dataclass(frozen=True)
class Mip:
    """minimise cost . x subject to row_lower <= A x <= row_upper and col_lower <= x <= col_upper,
    with the columns flagged in `col_integer` integral. Infinite bounds are math.inf."""

    col_names: tuple[str, ...]
    col_lower: tuple[float, ...]
    col_upper: tuple[float, ...]
    col_cost: tuple[float, ...]
    col_integer: tuple[bool, ...]
    row_names: tuple[str, ...]
    row_lower: tuple[float, ...]
    row_upper: tuple[float, ...]
    row_entries: tuple[tuple[tuple[int, float], ...], ...]
    """Per row, (column, coefficient) pairs."""

    @property
    def num_vars(self) -> int:
        """Number of columns."""
        return len(self.col_names)

    @property
    def num_constraints(self) -> int:
        """Number of rows."""
        return len(self.row_names)


@dataclass(frozen=True)
class MipResult:
    """A solver's answer: values of the best solution found and how good it is proven to be."""

    backend: str
    """`gurobi` or `highs`."""
    status: str
    """`optimal` (within the configured gap), or `node_limit` or `time_limit` (a feasible solution,
    gap open)."""
    values: tuple[float, ...]
    objective: float
    bound: float
    runtime_s: float
    """Wall time the solver reports for its solve."""


def check_config(config: SolverConfig) -> None:
    """Raise a PhazecError naming the first bad value of `config`."""
    if config.backend not in BACKENDS:
        raise PhazecError(
            f"solver.backend={config.backend!r} is not a backend; valid: {', '.join(BACKENDS)}."
        )
    if not (config.time_limit_s > 0 and math.isfinite(config.time_limit_s)):
        raise PhazecError(
            f"solver.time_limit_s={config.time_limit_s!r}; it must be a positive number of seconds."
        )
    if not 0 <= config.mip_gap < 1:
        raise PhazecError(f"solver.mip_gap={config.mip_gap!r}; it must be a relative gap in [0, 1).")
    limit = config.node_limit
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise PhazecError(
            f"solver.node_limit={limit!r}; it must be a whole number of branch-and-bound nodes >= 1."
        )
    search = config.search_node_limit
    if isinstance(search, bool) or not isinstance(search, int) or search < 0:
        raise PhazecError(
            f"solver.search_node_limit={search!r}; it must be a whole number of nodes >= 0 (0: no exact "
            "search, the ILP alone)."
        )
    most = config.ilp_max_ops
    if isinstance(most, bool) or not isinstance(most, int) or most < 1:
        raise PhazecError(
            f"solver.ilp_max_ops={most!r}; it must be a whole number of ops >= 1 (the largest graph the "
            "ILP solves; larger ones go to the exact search alone)."
        )
    if config.threads < 1:
        raise PhazecError(f"solver.threads={config.threads!r}; it must be at least 1.")


def solve(
    mip: Mip, config: SolverConfig, model_path: Path | None = None, start: tuple[float, ...] | None = None
) -> MipResult:
    """Solve `mip` with the configured backend; write the model to `model_path` (.lp) when given.

    `start`, a value per column, is offered to the solver as a first solution.

    Raises:
        PhazecError: if the model is infeasible or unbounded, no solution was found in the time
            limit, the forced backend cannot run, or the solver fails.
    """
    check_config(config)
    if config.backend == "highs":
        return _solve_highs(mip, config, model_path, start)
    try:
        return _solve_gurobi(mip, config, model_path, start)
    except _GurobiUnavailableError as err:
        if config.backend == "gurobi":
            raise PhazecError(
                f"solver.backend=gurobi cannot solve this model: {err}. Use solver.backend=highs or auto."
            ) from err
        logger.info("Gurobi cannot solve this model (%s); using HiGHS", err)
        return _solve_highs(mip, config, model_path, start)


class _GurobiUnavailableError(Exception):
    """Gurobi is missing or its licence refuses the model; `auto` falls back to HiGHS."""


def _solve_gurobi(
    mip: Mip, config: SolverConfig, model_path: Path | None, start: tuple[float, ...] | None
) -> MipResult:
    try:
        import gurobipy as gp
    except ImportError as err:
        raise _GurobiUnavailableError("gurobipy is not installed") from err
    try:
        with gp.Env(empty=True) as env:
            env.setParam("OutputFlag", 0)
            env.start()
            with gp.Model(env=env) as model:
                return _run_gurobi(gp, model, mip, config=config, model_path=model_path, start=start)
    except gp.GurobiError as err:
        if err.errno in _GUROBI_FALLBACK_ERRNOS:
            size = f"{mip.num_vars} variables, {mip.num_constraints} constraints"
            raise _GurobiUnavailableError(f"{_GUROBI_FALLBACK_ERRNOS[err.errno]}; {size}") from err
        raise PhazecError(f"Gurobi failed with error {err.errno}: {err}.") from err


def _run_gurobi(
    gp: Any,
    model: Any,
    mip: Mip,
    *,
    config: SolverConfig,
    model_path: Path | None,
    start: tuple[float, ...] | None,
) -> MipResult:
    grb = gp.GRB
    for name, value in (
        ("Threads", config.threads),
        ("Seed", config.seed),
        ("TimeLimit", config.time_limit_s),
        ("NodeLimit", float(config.node_limit)),
        ("MIPGap", config.mip_gap),
        ("IntFeasTol", INT_FEAS_TOL),
    ):
        model.setParam(name, value)
    vtype = [grb.INTEGER if integer else grb.CONTINUOUS for integer in mip.col_integer]
    x = model.addVars(
        mip.num_vars,
        lb=list(mip.col_lower),
        ub=list(mip.col_upper),
        obj=list(mip.col_cost),
        vtype=vtype,
        name=list(mip.col_names),
    )
    for name, lower, upper, entries in zip(
        mip.row_names, mip.row_lower, mip.row_upper, mip.row_entries, strict=True
    ):
        expr = gp.LinExpr([v for _, v in entries], [x[c] for c, _ in entries])
        if lower == upper:
            model.addLConstr(expr, grb.EQUAL, upper, name)
        elif math.isinf(lower):
            model.addLConstr(expr, grb.LESS_EQUAL, upper, name)
        elif math.isinf(upper):
            model.addLConstr(expr, grb.GREATER_EQUAL, lower, name)
        else:
            raise ValueError(f"row {name} is ranged; build only emits one-sided or equality rows")
    if start is not None:
        model.setAttr("Start", list(x.values()), list(start))
    model.update()
    if model_path is not None:
        model.write(str(model_path))
    model.optimize()
    status = model.Status
    if status == grb.INTERRUPTED:  # Gurobi catches Ctrl-C itself during a solve
        raise Interrupted(signal.SIGINT)
    if status in (grb.INFEASIBLE, grb.INF_OR_UNBD, grb.UNBOUNDED):
        raise PhazecError(_infeasible_message("Gurobi", mip))
    if model.SolCount == 0:
        raise PhazecError(_no_solution_message("Gurobi", str(status), config))
    stops = {grb.OPTIMAL: "optimal", grb.NODE_LIMIT: "node_limit", grb.TIME_LIMIT: "time_limit"}
    if status not in stops:
        raise PhazecError(f"Gurobi stopped with status {status} on the schedule of {mip.num_vars} variables.")
    return MipResult(
        backend="gurobi",
        status=stops[status],
        values=tuple(model.getAttr("X", x.values())),
        objective=model.ObjVal,
        bound=model.ObjBound,
        runtime_s=model.Runtime,
    )


@functools.cache
def _silence_highs_banner() -> None:
    """HiGHS prints its banner to file descriptor 1 when a process makes its first Highs object, before
    any option can silence it: make that first one with descriptor 1 pointed at /dev/null."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        with Path(os.devnull).open("w") as null:
            os.dup2(null.fileno(), 1)
            highspy.Highs()  # type: ignore[no-untyped-call]
    finally:
        os.dup2(saved, 1)
        os.close(saved)


def _solve_highs(
    mip: Mip, config: SolverConfig, model_path: Path | None, start: tuple[float, ...] | None
) -> MipResult:
    result = _run_highs(mip, config, model_path, start)
    if start is None or _objective_of(mip, result.values) <= result.objective * (1 + 1e-12) + 1e-12:
        return result
    # HiGHS (1.16) can report the optimum it proved while handing back the first solution it was
    # offered; its answer is then solved again without one.
    logger.debug("HiGHS returned its start instead of its optimum; solving again without the start")
    return _run_highs(mip, config, None, None)


def _objective_of(mip: Mip, values: tuple[float, ...]) -> float:
    return sum(cost * value for cost, value in zip(mip.col_cost, values, strict=True))


def _run_highs(
    mip: Mip, config: SolverConfig, model_path: Path | None, start: tuple[float, ...] | None
) -> MipResult:
    status_type = highspy.HighsModelStatus
    _silence_highs_banner()
    h = highspy.Highs()  # type: ignore[no-untyped-call]
    for name, value in (
        ("output_flag", False),
        ("threads", config.threads),
        ("random_seed", config.seed),
        ("time_limit", float(config.time_limit_s)),
        ("mip_max_nodes", config.node_limit),
        ("mip_rel_gap", float(config.mip_gap)),
        ("mip_feasibility_tolerance", INT_FEAS_TOL),
    ):
        h.setOptionValue(name, value)
    h.passModel(_highs_lp(mip))
    if model_path is not None:
        h.writeModel(str(model_path))
    if start is not None:
        h.setSolution(mip.num_vars, np.arange(mip.num_vars, dtype=np.int32), np.array(start))
    h.run()
    status = h.getModelStatus()
    info = h.getInfo()
    if status in (status_type.kInfeasible, status_type.kUnbounded, status_type.kUnboundedOrInfeasible):
        raise PhazecError(_infeasible_message("HiGHS", mip))
    stops = {
        status_type.kOptimal: "optimal",
        status_type.kSolutionLimit: "node_limit",  # HiGHS reports mip_max_nodes as a solution limit
        status_type.kTimeLimit: "time_limit",
    }
    has_solution = info.primal_solution_status == 2  # kSolutionStatusFeasible
    if status not in stops:
        raise PhazecError(
            f"HiGHS stopped with status {h.modelStatusToString(status)} on the schedule "
            f"of {mip.num_vars} variables."
        )
    if not has_solution:
        raise PhazecError(_no_solution_message("HiGHS", h.modelStatusToString(status), config))
    return MipResult(
        backend="highs",
        status=stops[status],
        values=tuple(h.getSolution().col_value),
        objective=info.objective_function_value,
        # A model without integer columns is an LP: HiGHS solves it by simplex, with no MIP bound.
        bound=info.mip_dual_bound if any(mip.col_integer) else info.objective_function_value,
        runtime_s=h.getRunTime(),
    )


def _highs_lp(mip: Mip) -> highspy.HighsLp:
    inf = highspy.kHighsInf
    lp = highspy.HighsLp()
    lp.num_col_ = mip.num_vars
    lp.num_row_ = mip.num_constraints
    lp.col_cost_ = np.array(mip.col_cost)
    lp.col_lower_ = np.clip(np.array(mip.col_lower), -inf, inf)
    lp.col_upper_ = np.clip(np.array(mip.col_upper), -inf, inf)
    lp.row_lower_ = np.clip(np.array(mip.row_lower), -inf, inf)
    lp.row_upper_ = np.clip(np.array(mip.row_upper), -inf, inf)
    matrix = lp.a_matrix_
    matrix.format_ = highspy.MatrixFormat.kRowwise
    matrix.num_col_ = mip.num_vars
    matrix.num_row_ = mip.num_constraints
    matrix.start_ = np.cumsum([0, *(len(e) for e in mip.row_entries)], dtype=np.int32)
    matrix.index_ = np.array([c for e in mip.row_entries for c, _ in e], dtype=np.int32)
    matrix.value_ = np.array([v for e in mip.row_entries for _, v in e], dtype=np.float64)
    kind = highspy.HighsVarType
    lp.integrality_ = [kind.kInteger if integer else kind.kContinuous for integer in mip.col_integer]
    lp.col_names_ = list(mip.col_names)
    lp.row_names_ = list(mip.row_names)
    return lp


def _infeasible_message(backend: str, mip: Mip) -> str:
    return (
        f"{backend} found the schedule model of {mip.num_vars} variables and {mip.num_constraints} "
        "constraints infeasible or unbounded, which a valid scheduling problem never is: every "
        "schedule that runs the operators one at a time is feasible. This is a bug in phazec's "
        "model; set solver.write_lp=true and report the written model file."
    )


def _no_solution_message(backend: str, status: str, config: SolverConfig) -> str:
    return (
        f"{backend} stopped ({status}) before finding any schedule within solver.time_limit_s="
        f"{config.time_limit_s}; raise solver.time_limit_s or try the other backend."
    )
