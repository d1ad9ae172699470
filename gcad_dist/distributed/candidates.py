"""The candidates of ``--contrast auto`` fitted side by side, as Ray tasks (``gcad_dist.train --candidate-workers``).

``--contrast auto`` trains three models from the same seed and keeps those validation cannot tell apart
(:func:`gcad_dist.train.keep_candidates`). The three fits are independent full-batch trainings, so they can
run at once: one Ray task each, with ``--threads`` CPUs (or one GPU), on this machine (Ray started in this
process, no dashboard) or on the cluster of ``--address`` / ``$RAY_ADDRESS``. The graph goes to the object
store once. Each task returns its :class:`gcad_dist.supervised.FitResult` (scores, snapshot states, history)
and the driver rebuilds the model from its best state, so what follows (the choice, the checkpoint) is the
same as after fitting one after another: a task runs :func:`gcad_dist.train.fit_candidate`, the very
function of the sequential path, with the same seed and thread count.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from typing import Any, Callable

import torch
from tqdm.auto import tqdm

from gcad_dist.allocator import retain_freed_memory
from gcad_dist.cli import bar_disable

log = logging.getLogger(__name__)


def _fit_task(cfg: Any, data: Any, fit_split: Any, scfg: Any, contrast: str, norm: str,
              init: Callable[[torch.nn.Module], None] | None, threads: int, state_prefix: str = "") -> tuple[Any, Any]:
    """One candidate's fit inside a Ray worker: (FitResult, model config); the module itself stays here."""
    from gcad_dist.cli import setup_logging
    from gcad_dist.train import fit_candidate

    setup_logging(cfg.verbose)
    if threads > 0:
        torch.set_num_threads(threads)
    retain_freed_memory()
    res, _, model_cfg = fit_candidate(cfg, data, fit_split, scfg, contrast, norm, init, state_prefix)
    return res, model_cfg


def task_threads(threads: int, workers: int) -> int:
    """CPUs (torch threads) per task: ``--threads`` when given, else this machine's CPUs shared by the tasks."""
    return threads if threads > 0 else max(1, (os.cpu_count() or 1) // max(1, workers))


def fit_side_by_side(cfg: Any, data: Any, fit_split: Any, scfg: Any, candidates: tuple[tuple[str, str], ...],
                     init: Callable[[torch.nn.Module], None] | None = None,
                     state_prefix: str = "") -> list[tuple[Any, torch.nn.Module, Any]]:
    """Fit each (contrast, norm) candidate of ``cfg`` as a Ray task, at most ``cfg.candidate_workers`` at once;
    returns [(FitResult, model at its best state, model config)] in candidate order, as
    :func:`gcad_dist.train.fit_models` does one after another. A task's error is raised here as itself. With
    ``scfg.state_dir`` (a folder every task can reach) each task writes and resumes its fit's state there."""
    import ray

    from gcad_dist.distributed.ray_runtime import start_ray, stop_ray
    from gcad_dist.supervised import resolve_device
    from gcad_dist.train import build_candidate, candidate_name

    workers = min(cfg.candidate_workers, len(candidates))
    device = resolve_device(scfg.device)
    use_gpu = device.type == "cuda"
    threads = task_threads(cfg.threads, workers)
    started = start_ray(cfg.address, num_cpus=workers * threads, dashboard=False,
                        what=f"{workers} candidate fits side by side")
    results: list[Any] = [None] * len(candidates)
    t0 = time.perf_counter()
    try:
        task = ray.remote(_fit_task).options(num_cpus=threads, num_gpus=1 if use_gpu else 0)
        data_ref = ray.put(data)
        task_scfg = dataclasses.replace(scfg, progress=False)  # one bar here instead of interleaved ones
        queue = list(enumerate(candidates))
        pending: dict[Any, int] = {}
        with tqdm(total=len(candidates), desc="candidates", unit="fit", disable=bar_disable(scfg.progress)) as bar:
            while queue or pending:
                while queue and len(pending) < workers:
                    i, (contrast, norm) = queue.pop(0)
                    pending[task.remote(cfg, data_ref, fit_split, task_scfg, contrast, norm, init, threads,
                                        state_prefix)] = i
                done, _ = ray.wait(list(pending), num_returns=1)
                for ref in done:
                    i = pending.pop(ref)
                    try:
                        results[i] = ray.get(ref)
                    except ray.exceptions.RayTaskError as e:  # the task's own exception (UsageError, ...)
                        raise e.as_instanceof_cause() from None
                    bar.update(1)
                    log.info("candidate %s fitted: best epoch %d, %.0f s since the start",
                             candidate_name(results[i][1], cfg.norm), results[i][0].best_epoch,
                             time.perf_counter() - t0)
    finally:
        if started:
            stop_ray()
    fits = []
    for (contrast, norm), (res, model_cfg) in zip(candidates, results):
        model, _ = build_candidate(cfg, data.num_features, contrast, norm)
        model.load_state_dict(res.state_dict)
        fits.append((res, model.to(device), model_cfg))
    return fits
