"""The training state of a labelled run on disk, so that an interrupted ``gcad_dist.train`` or ``gcad_dist.finetune``
continues where it stopped (``--resume``) instead of starting over.

A run keeps ``<out>/unfinished/`` while it trains:

* ``run.json``: the settings that decide its results (every option but where it runs and what it prints);
  ``--resume`` refuses other settings, naming each option that differs;
* one ``<fit>.pt`` per model it fits (a ``--contrast auto`` candidate, a fine-tuning start): the model, Adam's and
  the learning-rate schedule's state, every random generator, the history and the snapshot ensemble's best
  evaluations so far, written atomically at an epoch end at most every ``--checkpoint-interval`` seconds, at a
  requested stop, and when the fit ends (a finished fit is then not trained again).

The folder is deleted once the run has written its outputs. A resumed fit continues the same random streams from
the same state, so it ends where the uninterrupted run would have, to the bit on the same machine and thread count.
Ctrl-C (SIGINT) or SIGTERM during a fit stops it at the end of the epoch under way, after writing its state (a
second Ctrl-C stops at once, losing at most the work since the last write).

Files hold tensors and plain data only and are read with ``torch.load(weights_only=True)``
(:mod:`gcad_dist.checkpoint`).
"""

from __future__ import annotations

import json
import logging
import shutil
import signal
import threading
import time
from pathlib import Path
from typing import Any

import torch

from gcad_dist.checkpoint import atomic_save, safe_load
from gcad_dist.cli import UsageError

log = logging.getLogger(__name__)

STATE_DIR = "unfinished"
RUN_FILE = "run.json"
OUT_CREATED = "out_created"  # marker: this run created --out (removed again if the run fails before any output)
STATE_VERSION = 1


class ResumeMismatch(ValueError):
    """A saved fit state that belongs to another fit (other settings, graph, split or initial weights)."""


class FitInterrupted(KeyboardInterrupt):
    """A fit stopped on request (Ctrl-C, SIGTERM) at an epoch end, after writing its state."""

    def __init__(self, epoch: int, path: Path) -> None:
        super().__init__(f"stopped after epoch {epoch}; state written to {path}")
        self.epoch, self.path = epoch, path


def has_unfinished_run(out: str | Path) -> bool:
    """Whether ``out`` holds a run that stopped part-way with a fit state saved (what ``--resume`` continues)."""
    folder = Path(out) / STATE_DIR
    return (folder / RUN_FILE).exists() and any(folder.glob("*.pt"))


def prepare_state_dir(out: str | Path, settings: dict[str, Any], resume: bool, overwrite: bool,
                      options: dict[str, str] | None = None, added: dict[str, Any] | None = None) -> Path:
    """Check ``<out>/unfinished`` against ``resume`` / ``overwrite`` and this run's ``settings``; returns the folder.

    * no unfinished run there (no fit state saved): ``--resume`` is an error; otherwise the folder is (re)created
      with ``run.json``;
    * an unfinished run and neither flag: an error saying how to continue it or start over;
    * ``overwrite``: the unfinished run is deleted first;
    * ``resume``: its ``run.json`` must hold the same settings (an error names each differing option, ``options``
      maps a setting to its option name). ``added`` maps a setting added after such a run may have been written to
      what the code ran before it existed: a ``run.json`` without it reads as that value.
    """
    folder = Path(out) / STATE_DIR
    run_file = folder / RUN_FILE
    settings = json.loads(json.dumps(settings, default=str))  # as it reads back from JSON
    if resume and overwrite:
        raise UsageError("--resume cannot be combined with --overwrite")
    if overwrite and folder.exists():
        log.info("--overwrite: deleting the unfinished run in %s", folder)
        shutil.rmtree(folder)
    # a run that stopped before any fit wrote its state (a bad graph, a crash in the first minute) left nothing to
    # continue: it is replaced
    exists = has_unfinished_run(out)
    if resume and not exists:
        raise UsageError(f"--resume: {out} holds no unfinished run (no fit state in {folder})")
    if exists and not resume:
        raise UsageError(f"--out: {out} holds an unfinished run ({describe(folder)}); pass --resume to continue "
                         "it, or --overwrite to start over")
    if exists:
        try:
            saved = json.loads(run_file.read_text())
        except (OSError, ValueError) as e:
            raise UsageError(f"--resume: cannot read {run_file}: {e}") from None
        options = options or {}
        saved = {**{k: v for k, v in (added or {}).items() if k in settings}, **saved}
        diff = sorted(k for k in set(saved) | set(settings) if saved.get(k) != settings.get(k))
        if diff:
            show = "; ".join(f"{options.get(k, k)}: {saved.get(k)!r} in the unfinished run, {settings.get(k)!r} now"
                             for k in diff)
            raise UsageError(f"--resume: the unfinished run in {out} has other settings ({show}); resume with the "
                             "same settings, or start over with --overwrite")
        log.info("resuming the unfinished run in %s (%s)", out, describe(folder))
        return folder
    if folder.exists():
        shutil.rmtree(folder)
    out_created = not Path(out).exists()
    folder.mkdir(parents=True)
    if out_created:  # so that a run that fails before writing anything leaves no empty --out behind (abandon)
        (folder / OUT_CREATED).touch()
    tmp = run_file.with_suffix(".tmp")
    tmp.write_text(json.dumps(settings, indent=1, sort_keys=True))
    tmp.replace(run_file)
    return folder


def describe(folder: Path) -> str:
    """One line on the fits saved in ``folder``: which, at which epoch, finished or not."""
    parts = []
    for p in sorted(folder.glob("*.pt")):
        try:
            s = safe_load(p)
            parts.append(f"{p.stem} {'finished' if s.get('done') else 'at epoch ' + str(s.get('epoch'))}")
        except Exception:  # noqa: BLE001 - a description only
            parts.append(f"{p.stem} unreadable")
    return ", ".join(parts) if parts else "no fit saved yet"


def abandon(folder: Path | None, error: BaseException) -> None:
    """After a run stopped with ``error``: delete ``folder`` when no fit saved anything there (nothing to continue,
    e.g. a bad graph), and ``--out`` too when this run created it and it is left empty; else keep it and log how to
    continue."""
    if folder is None or not folder.exists():
        return
    if not any(folder.glob("*.pt")):
        out_created = (folder / OUT_CREATED).exists()
        shutil.rmtree(folder, ignore_errors=True)
        if out_created and not any(folder.parent.iterdir()):
            folder.parent.rmdir()
        return
    what = "interrupted" if isinstance(error, KeyboardInterrupt) else f"stopped by {type(error).__name__}"
    log.warning("%s: the training state is in %s (%s); continue with the same command and --resume", what, folder,
                describe(folder))


def finish(folder: Path | None) -> None:
    """Delete the unfinished run's folder once the run's outputs are written."""
    if folder is not None and folder.exists():
        shutil.rmtree(folder, ignore_errors=True)


def fingerprint(model: torch.nn.Module, data: Any, masks: tuple[torch.Tensor, ...], settings: dict[str, Any]) -> dict:
    """What a saved fit state must match to be continued: the fit's settings, the graph's size, the split (each mask's
    size and index sum) and the model's parameters (names, shapes and the sum of the initial weights, which a warm
    start or another seed changes)."""
    params = {k: list(v.shape) for k, v in model.state_dict().items()}
    with torch.no_grad():
        total = float(sum(v.detach().double().sum().item() for v in model.state_dict().values() if v.is_floating_point()))
    split = [[int(m.sum()), int(m.nonzero().sum())] for m in masks]
    return {"settings": dict(settings), "nodes": int(data.num_nodes), "edges": int(data.edge_index.shape[1]),
            "features": int(data.num_features), "split": split, "params": params, "init_sum": total}


def same_fit(saved: dict, now: dict) -> list[str]:
    """What differs between two fingerprints, one entry each (a setting as ``lr 0.001 saved, 0.01 now``; the initial
    weights' sum to a relative 1e-9); empty when the saved state belongs to this fit."""
    diff = []
    for k in now:
        if k == "init_sum" or saved.get(k) == now[k]:
            continue
        if k == "settings":
            old, new = saved.get(k) or {}, now[k]
            diff += [f"{n} {old.get(n)!r} saved, {new.get(n)!r} now" for n in sorted(set(old) | set(new))
                     if old.get(n) != new.get(n)]
        else:
            diff.append(k)
    a, b = saved.get("init_sum"), now["init_sum"]
    if a is None or abs(a - b) > 1e-9 * max(1.0, abs(b)):
        diff.append("init_sum (the initial weights)")
    return diff


class FitCheckpointer:
    """Writes one fit's state to ``path`` at epoch ends: when ``interval`` seconds have passed since the last
    write (0 = every epoch), and whenever :meth:`save` is called with ``force``."""

    def __init__(self, path: str | Path, interval: float = 60.0) -> None:
        self.path = Path(path)
        self.interval = float(interval)
        self._last = time.monotonic()

    def load(self) -> dict | None:
        """The saved state, or ``None`` when there is none."""
        if not self.path.exists():
            return None
        state = safe_load(self.path)
        if not isinstance(state, dict) or state.get("version") != STATE_VERSION:
            raise ResumeMismatch(f"{self.path}: not a fit state of this version")
        return state

    def due(self) -> bool:
        return time.monotonic() - self._last >= self.interval

    def save(self, state: dict) -> None:
        atomic_save({"version": STATE_VERSION, **state}, self.path)
        self._last = time.monotonic()


class StopRequest:
    """While entered (in the main thread), SIGINT and SIGTERM set :attr:`requested` instead of stopping the
    process, so a fit can stop at its next epoch end with its state written; a second signal restores the previous
    handlers and raises ``KeyboardInterrupt`` at once. Elsewhere (another thread, a Ray task) it does nothing."""

    def __init__(self) -> None:
        self.requested = False
        self._old: dict[int, Any] = {}

    def _handle(self, signum: int, frame: Any) -> None:
        if self.requested:
            self._restore()
            raise KeyboardInterrupt
        self.requested = True
        log.warning("%s: stopping at the end of this epoch, after writing the training state (again to stop at once)",
                    signal.Signals(signum).name)

    def _restore(self) -> None:
        for s, h in self._old.items():
            signal.signal(s, h)
        self._old = {}

    def __enter__(self) -> "StopRequest":
        if threading.current_thread() is threading.main_thread():
            for s in (signal.SIGINT, signal.SIGTERM):
                try:
                    self._old[s] = signal.signal(s, self._handle)
                except (ValueError, OSError):  # not settable here
                    pass
        return self

    def __exit__(self, *exc: Any) -> None:
        self._restore()
