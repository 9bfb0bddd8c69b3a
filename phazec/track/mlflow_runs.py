"""MLflow runs from Hydra's callbacks; the search itself knows nothing of MLflow.

A single run is one MLflow run, named by what it was (`run_title`: the model, space and strategy of a
search, the model, chip and widths of a plan) and, once it ends, its headline (throughput,
and a search's speedup over TPUv4 or a plan's MFU), which MLflow's run list shows without choosing
columns. A multirun is a parent run with a nested run per job; the parent gets
the sweep summary (`phazec.report.sweep`) and the list of jobs that ran (`sweep_jobs.json`). A job's
run gets every config value as a param, the found design and plan as params too (`found.design.*`,
`found.plan.*`), the result's figures and its time's band as metrics (`band.low_s`, `band.high_s`; how
it was made as the `band` tag), and `result.json`, `explored.csv`, `trace.json`, the plots and the
resolved config as artifacts (a `phazec-ir` job: `ir.json`); it ends FINISHED or, with the job's
error as the `error` tag, FAILED (KILLED when SIGINT or SIGTERM stopped it,
`phazec.util.interrupt`).

Logging never fails a job: the first MLflow error is reported in one warning line and tracking stops
for the rest of the process, while the results are written to the run directories as usual.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.utils import JobReturn, JobStatus
from omegaconf import DictConfig, OmegaConf

from phazec.config.command_line import model_list, override_strings
from phazec.report.result import headline_throughput, is_multi
from phazec.report.sweep import ERROR_TXT, Summary
from phazec.track.sweep import SweepCallback, error_message, error_text, one_line
from phazec.util.interrupt import Interrupted

if TYPE_CHECKING:
    from mlflow.tracking import MlflowClient

log = logging.getLogger(__name__)

SQLITE_PREFIX = "sqlite:///"
DEFAULT_STORE = "phazec.db"
"""The SQLite store used when `tracking.uri` is empty, in the directory the command started in."""
ARTIFACTS_DIR = "mlartifacts"
"""Artifacts of a SQLite store's experiments, beside the store."""
PARAMS_PER_REQUEST = 100
"""MLflow's limit of params in one `log_batch`."""
JOB_ARTIFACTS = ("result.json", "explored.csv", "common.csv", "ir.json", "plan.json", "trace.json")
"""A job's files logged when present (common.csv: several models; ir.json: `phazec-ir`; plan.json:
`phazec-plan`; trace.json: a search's found plan, or a plan with `plan.trace`), beside its plots and,
for several models, each model's own run directory."""
BAND_TAG = "band"
"""The tag saying how a run's time band was made (`phazec.hw.validation.band_record`'s `basis`, e.g.
"a100 held-out residuals (21 rows), 90%", or why there is none); its ends are the metrics
`band.low_s` and `band.high_s`."""
RESULT_PARAMS = ("design", "plan")
"""The entries of result.json logged as params (`design.num_tc`, `plan.pp`, ...; a plan's stage list
excepted), so runs can be sorted and filtered by the found design and plan."""
ERROR_TAG = "error"
JOBS_JSON = "sweep_jobs.json"
"""The parent run's record of the jobs that ran: number, overrides and status of each."""
LOCKED_RETRIES = 10
"""Retries of a logging step while another process holds a SQLite store's write lock."""


def store_uri(uri: str, cwd: Path) -> str:
    """The tracking URI: `uri`, or the SQLite file `phazec.db` in `cwd` when it is empty."""
    return uri or f"{SQLITE_PREFIX}{cwd / DEFAULT_STORE}"


def artifact_location(uri: str, artifacts: str, cwd: Path) -> str | None:
    """Where a new experiment keeps its artifacts: `artifacts` if given, `mlartifacts/` beside a SQLite
    store, else None (the tracking server's own location)."""
    if artifacts:
        return artifacts
    if uri.startswith(SQLITE_PREFIX):
        store = cwd / uri.removeprefix(SQLITE_PREFIX)  # absolute for sqlite:////abs/file.db
        return (store.parent / ARTIFACTS_DIR).as_uri()
    return None


@contextlib.contextmanager
def store_lock(uri: str, cwd: Path) -> Iterator[None]:
    """Hold an exclusive lock on `<store>.lock` beside a SQLite store (nothing for other stores), so
    that processes starting at once create its tables and the experiment one after another."""
    if not uri.startswith(SQLITE_PREFIX):
        yield
        return
    lock = cwd / (uri.removeprefix(SQLITE_PREFIX) + ".lock")
    lock.parent.mkdir(parents=True, exist_ok=True)
    with lock.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def flat_items(value: Any, prefix: str = "") -> Iterator[tuple[str, str]]:
    """(dotted key, text) of every leaf of nested dicts; lists are leaves."""
    if isinstance(value, dict):
        for key, inner in value.items():
            yield from flat_items(inner, f"{prefix}{key}.")
    else:
        yield prefix.removesuffix("."), str(value)


def job_params(config: DictConfig) -> dict[str, str]:
    """Every value of a job's resolved config except Hydra's own, by dotted key. For several models
    (`model=[a,b,...]`, which Hydra merges into one `model` node) the `model` param is the list."""
    values = OmegaConf.to_container(
        OmegaConf.masked_copy(config, [str(k) for k in config if k != "hydra"]), resolve=True
    )
    assert isinstance(values, dict)
    names, _ = model_list(override_strings(config.hydra.overrides.task))
    if names is not None and len(names) > 1:
        values["model"] = f"[{','.join(names)}]"
    return dict(flat_items(values))


def job_metrics(result: dict[str, Any]) -> dict[str, float]:
    """The figures of a result.json: throughput, time per batch, area, speedups over each baseline,
    designs evaluated and pruned, the time of each search stage, and for one model the plan's peak
    power, throughput per watt, core utilisation and energy by part (`energy_per_sample_j.total`, ...).
    For several models (`model=[a,b,...]`) the per-model figures on the common design are named
    `<figure>.<model>`, beside their mean `throughput_samples_per_s`."""
    metrics = {
        "throughput_samples_per_s": headline_throughput(result),
        "area_mm2": result["design"]["area_mm2"],
        "hbm_bytes": result["design"]["hbm_bytes"],
    }
    if is_multi(result):
        for model in result["model"]:
            metrics |= {f"{k}.{model}": v for k, v in model_metrics(result, model).items()}
    else:
        metrics |= model_metrics(result, None)
    if "peak_power_w" in result:
        figures = ("peak_power_w", "throughput_per_watt", *(k for k in result if "_utilisation_" in k))
        metrics |= {key: result[key] for key in figures}
        for key in ("energy_per_iteration_j", "energy_per_sample_j"):
            metrics |= {f"{key}.{part}": value for part, value in result[key].items()}
    search = result["search"]
    for key in ("designs_total", "designs_evaluated", "designs_pruned", "ilp_cache_hits",
                "wall_s", "cost_s", "ilp_s", "dp_s"):  # fmt: skip
        metrics[key] = search[key]
    return {k: float(v) for k, v in metrics.items() if v is not None}


def band_metrics(record: dict[str, Any] | None) -> dict[str, float]:
    """A band's ends (`band.low_s`, `band.high_s`); none without one (no validation data, or a result
    of several models, whose bands are each model's)."""
    if record is None or record["low_s"] is None:
        return {}
    return {"band.low_s": float(record["low_s"]), "band.high_s": float(record["high_s"])}


def run_title(config: DictConfig) -> str:
    """What a single run was, for its name: a search by its model(s), hw space and strategy, a plan by
    its model, chip and widths, a lowering by its model (the overrides are its params)."""
    names, _ = model_list(override_strings(config.hydra.overrides.task))
    model = ",".join(names) if names is not None and len(names) > 1 else str(config.model.name)
    kind = str(config.hydra.job.config_name)
    if kind == "plan":
        plan = config.plan
        return f"plan {model} on {config.hw.name}: tp {plan.tp} x pp {plan.pp} x dp {plan.dp}"
    if kind == "ir":
        return f"lower {model}"
    return f"search {model} over {config.hw.name} ({config.search.strategy})"


def result_params(result: dict[str, Any]) -> dict[str, str]:
    """The found design and plan of a result.json as params by dotted key (`found.design.num_tc`,
    `found.plan.pp`; for several models `found.plan.<model>.pp`), without the plans' stage lists."""
    chosen = {"found": {key: result[key] for key in RESULT_PARAMS}}  # `plan.*` are phazec-plan's keys
    return {k: v for k, v in flat_items(chosen) if not k.endswith(".stages")}


def plan_metrics(plan: dict[str, Any]) -> dict[str, float]:
    """The figures of a plan.json: time, throughput, utilisation, the breakdown and the memory."""
    metrics = {key: plan[key] for key in ("time_per_batch_s", "samples_per_s", "tokens_per_s",
                                          "model_tflops_per_device", "mfu", "hfu")}  # fmt: skip
    metrics |= {f"breakdown.{k}": v for k, v in plan["breakdown"].items()}
    metrics |= {f"memory.{k}": v for k, v in plan["memory"].items()}
    return {k: float(v) for k, v in metrics.items()}


def result_headline(result: dict[str, Any]) -> str:
    """A search's headline, added to its run's name so that MLflow's run list shows it: throughput (for
    several models, their mean) and, for one model, the speedup over TPUv4 with its optimal plan (over
    the chip's default plan on one GPU design; none when the reference has no plan)."""
    throughput = f"{headline_throughput(result):.4g} samples/s"
    if is_multi(result):
        return f"{throughput} (mean)"
    for key, name in (("speedup_vs_tpuv4", "TPUv4"), ("speedup_vs_megatron_default", "default plan")):
        if result.get(key) is not None:
            return f"{throughput}, {result[key]:.2f}x {name}"
    return throughput


def plan_headline(plan: dict[str, Any]) -> str:
    """A timed plan's headline, added to its run's name: throughput, MFU and whether it fits."""
    fits = "fits" if plan["fits"] else "over HBM"
    return f"{plan['samples_per_s']:.4g} samples/s, MFU {plan['mfu']:.1%}, {fits}"


def model_metrics(result: dict[str, Any], model: str | None) -> dict[str, float | None]:
    """One model's time per batch and speedups over its baselines (`model`: its key in a
    several-model result; None for a one-model result)."""

    def pick(value: Any) -> Any:
        return value if model is None else value[model]

    throughput = pick(result["throughput_samples_per_s"])
    metrics = {"time_per_batch_s": pick(result["time_per_batch_s"])}
    if model is not None:
        metrics["throughput_samples_per_s"] = throughput
    for name, baseline in pick(result["baselines"]).items():
        if baseline["throughput_samples_per_s"]:
            metrics[f"speedup_vs_{name}"] = throughput / baseline["throughput_samples_per_s"]
    return metrics


class MlflowCallback(SweepCallback):
    """Logs jobs and sweeps to MLflow (`tracking` config: uri, experiment, artifacts, HTTP limits).

    State set by `on_multirun_start` (URI, experiment, parent run) travels with the callback to the
    processes of parallel launchers; each job's run id is local to the process running the job.
    """

    def __init__(self) -> None:
        super().__init__()
        self._uri = ""
        self._experiment_id = ""
        self._parent_id: str | None = None
        self._shared_keys: list[str] = []
        """Keys the sweep's command line sets to one value for every job."""
        self._run_id: str | None = None
        self._run_name = ""
        self._broken = False

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        """Open the parent run of the sweep."""
        super().on_multirun_start(config, **kwargs)
        self._guard(str(config.hydra.sweep.dir), self._start_parent, config)

    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        """Open the job's run (nested under the sweep's) and log its params."""
        self._guard(str(config.hydra.runtime.output_dir), self._start_job, config)

    def on_job_end(self, config: DictConfig, job_return: JobReturn, **kwargs: Any) -> None:
        """Log the job's metrics and artifacts, or its error, and end its run."""
        self._guard(str(config.hydra.runtime.output_dir), self._end_job, config, job_return)
        super().on_job_end(config, job_return, **kwargs)

    def sweep_ended(self, summary: Summary, failed: bool) -> None:
        """Log the summary to the parent run and end it (FAILED if a job failed)."""
        super().sweep_ended(summary, failed)
        if self._parent_id is not None:
            self._guard(str(self._sweep_dir), self._end_parent, summary, failed)

    def _guard(self, results_dir: str, step: Callable[..., None], *args: Any) -> None:
        """Run one logging step (again while a SQLite store stays locked by another process, up to
        `LOCKED_RETRIES` times); on its first failure say so once and stop tracking."""
        if self._broken:
            return
        try:
            for attempt in range(LOCKED_RETRIES + 1):
                try:
                    step(*args)
                    break
                except Exception as error:
                    if "database is locked" not in str(error) or attempt == LOCKED_RETRIES:
                        raise
                    time.sleep(0.2 * (attempt + 1))
        except Exception as error:
            self._broken = True
            log.warning(
                "MLflow logging failed, nothing more is tracked at %s (results are still written to %s): %s",
                self._uri, results_dir, one_line(error)[:500],
            )  # fmt: skip

    def _client(self) -> MlflowClient:
        from mlflow.tracking import MlflowClient

        # A new SQLite store says it creates its tables; the run's own log says where the store is.
        logging.getLogger("mlflow.store.db.utils").setLevel(logging.WARNING)
        return MlflowClient(tracking_uri=self._uri)

    def _open(self, config: DictConfig) -> MlflowClient:
        """The client of the configured store, with its experiment found or created."""
        if self._uri:
            return self._client()
        tracking = config.tracking
        cwd = Path(config.hydra.runtime.cwd)
        self._uri = store_uri(tracking.uri, cwd)
        if self._uri.startswith(("http://", "https://")):
            os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] = str(tracking.http_retries)
            os.environ["MLFLOW_HTTP_REQUEST_TIMEOUT"] = str(tracking.http_timeout_s)
            # urllib3 warns on every retry; the one warning of `_guard` says what failed
            logging.getLogger("urllib3.connectionpool").setLevel(logging.ERROR)
        with store_lock(self._uri, cwd):
            client = self._client()
            experiment = client.get_experiment_by_name(tracking.experiment)
            if experiment is None:
                location = artifact_location(self._uri, tracking.artifacts, cwd)
                self._experiment_id = client.create_experiment(
                    tracking.experiment, artifact_location=location
                )
            else:
                self._experiment_id = experiment.experiment_id
        return client

    def _start_parent(self, config: DictConfig) -> None:
        client = self._open(config)
        sweep_dir = Path(config.hydra.sweep.dir)
        parsed = OverridesParser.create().parse_overrides(override_strings(config.hydra.overrides.task))
        self._shared_keys = [o.get_key_element() for o in parsed if not o.is_sweep_override()]
        declared = OmegaConf.select(config, "hydra.sweeper.params", default=None)
        run = client.create_run(self._experiment_id, run_name=f"sweep {sweep_dir.name}")
        self._parent_id = run.info.run_id
        client.log_param(
            self._parent_id, "sweep_overrides", " ".join(override_strings(config.hydra.overrides.task))
        )
        if declared is not None:
            client.log_param(self._parent_id, "sweep_params", json.dumps(OmegaConf.to_container(declared)))
        client.set_tag(self._parent_id, "sweep_dir", str(sweep_dir))

    def _job_name(self, config: DictConfig) -> str:
        """A single run's title (`run_title`); a sweep job's number and the overrides of the keys it
        sweeps."""
        overrides = override_strings(config.hydra.overrides.task)
        if self._parent_id is None:
            return run_title(config)
        mine = [o for o in overrides if o.split("=", 1)[0] not in self._shared_keys]
        return f"job {config.hydra.job.num}: {' '.join(mine)}"

    def _start_job(self, config: DictConfig) -> None:
        from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID

        client = self._open(config)
        tags = {} if self._parent_id is None else {MLFLOW_PARENT_RUN_ID: self._parent_id}
        self._run_name = self._job_name(config)
        run = client.create_run(self._experiment_id, run_name=self._run_name, tags=tags)
        self._run_id = run.info.run_id
        self._log_params(self._run_id, job_params(config))

    def _log_params(self, run_id: str, values: dict[str, str]) -> None:
        from mlflow.entities import Param

        params = [Param(k, v) for k, v in values.items()]
        for i in range(0, len(params), PARAMS_PER_REQUEST):
            self._client().log_batch(run_id, params=params[i : i + PARAMS_PER_REQUEST])

    def _log_metrics(self, run_id: str, metrics: dict[str, float]) -> None:
        from mlflow.entities import Metric

        now_ms = int(time.time() * 1000)
        self._client().log_batch(run_id, metrics=[Metric(k, v, now_ms, 0) for k, v in metrics.items()])

    def _end_job(self, config: DictConfig, job_return: JobReturn) -> None:
        assert self._run_id is not None
        start = time.perf_counter()
        client = self._client()
        out_dir = Path(config.hydra.runtime.output_dir)
        resolved = out_dir / str(config.hydra.output_subdir) / "config.yaml"
        if resolved.is_file():
            client.log_artifact(self._run_id, str(resolved), artifact_path="hydra")
        if job_return.status is JobStatus.COMPLETED:
            files = [out_dir / name for name in JOB_ARTIFACTS if (out_dir / name).is_file()]
            for path in [*files, *sorted(out_dir.glob("*.png"))]:
                client.log_artifact(self._run_id, str(path))
            if (out_dir / "result.json").is_file():  # a search (phazec-ir writes ir.json alone)
                result = json.loads((out_dir / "result.json").read_text())
                self._log_result(self._run_id, out_dir, result)
                client.update_run(self._run_id, name=f"{self._run_name}: {result_headline(result)}")
            elif (out_dir / "plan.json").is_file():  # a phazec-plan job
                plan = json.loads((out_dir / "plan.json").read_text())
                self._log_metrics(self._run_id, plan_metrics(plan) | band_metrics(plan["band"]))
                client.set_tag(self._run_id, BAND_TAG, plan["band"]["basis"])
                client.update_run(self._run_id, name=f"{self._run_name}: {plan_headline(plan)}")
            status = "FINISHED"
        else:
            error = job_return._return_value  # the exception the job raised (JobReturn's own field)
            client.set_tag(self._run_id, ERROR_TAG, error_message(error)[:5000])
            client.log_text(self._run_id, error_text(error), ERROR_TXT)
            status = "KILLED" if isinstance(error, Interrupted) else "FAILED"
        client.set_terminated(self._run_id, status)
        log.info(
            "tracking: %.1f s, run %s %s in %s", time.perf_counter() - start, self._run_id, status, self._uri
        )
        self._run_id = None

    def _log_result(self, run_id: str, out_dir: Path, result: dict[str, Any]) -> None:
        """A search's figures and its band as metrics, the band's basis as a tag, its design and plan as
        params, each model's directory."""
        self._log_metrics(run_id, job_metrics(result) | band_metrics(result.get("band")))
        if "band" in result:
            self._client().set_tag(run_id, BAND_TAG, result["band"]["basis"])
        self._log_params(run_id, result_params(result))
        for model in result["model"] if is_multi(result) else []:
            self._client().log_artifacts(run_id, str(out_dir / model), artifact_path=model)

    def _end_parent(self, summary: Summary, failed: bool) -> None:
        assert self._parent_id is not None
        client = self._client()
        failed_jobs = sum(j.result is None for j in summary.jobs)
        metrics = {"jobs": float(len(summary.jobs)), "jobs_failed": float(failed_jobs)}
        best = summary.best
        if best is not None and best.result is not None:
            figures = plan_metrics if best.kind == "plan" else job_metrics
            metrics |= figures(best.result) | {"best_job": float(best.num)}
        self._log_metrics(self._parent_id, metrics)
        for path in summary.paths:
            client.log_artifact(self._parent_id, str(path))
        ran = [{"job": j.num, "overrides": j.overrides, "status": "ok" if j.result else "failed"}
               for j in summary.jobs]  # fmt: skip
        client.log_dict(self._parent_id, {"jobs": ran}, JOBS_JSON)
        status = "KILLED" if self.interrupted else "FAILED" if failed or failed_jobs else "FINISHED"
        client.set_terminated(self._parent_id, status)
