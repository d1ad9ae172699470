"""A bench's study of (dataset, seed) pairs: one JSON record per pair in a folder, written whole (a crash mid-write
leaves no half file) and read back when the bench runs again, so that a stopped study resumes where it stopped.
Shared by ``bench.train_rejoin``, ``bench.forest_few``, ``bench.forest_columns`` and ``bench.score_smoothing``, with the
paired Markdown table they print (``paired_table``) and one default ``gcad_dist.train`` run whose forest view a bench
wraps (``train_with_forest_view``)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script or with -m from the repo

from gcad_dist.cli import UsageError  # noqa: E402

__all__ = ["Column", "paired_table", "parse_seeds", "run_study", "train_with_forest_view"]

#: An extra table column: its header, and its cell from one dataset's records.
Column = tuple[str, Callable[[list[dict[str, Any]]], str]]


def parse_seeds(text: str, option: str = "--seeds") -> list[int]:
    """Comma-separated seeds (``"0,1,2"``); a usage error, naming ``option``, where none is given or one is not an
    integer."""
    try:
        seeds = [int(s) for s in str(text).split(",") if s.strip()]
    except ValueError as e:
        raise UsageError(f"{option}: comma-separated integers expected, got {text!r}") from e
    if not seeds:
        raise UsageError(f"{option}: at least one")
    return seeds


def run_study(out: str | Path, datasets: list[str], seeds: list[int], run_one: Callable[[str, int], dict[str, Any]],
              reuse: Callable[[dict[str, Any]], bool] | None = None, desc: str = "study") -> list[dict[str, Any]]:
    """Every (dataset, seed)'s record, in order: ``out/<dataset>-s<seed>.json`` where it exists (and ``reuse`` accepts
    it), else ``run_one(dataset, seed)``, written there first. A progress bar counts the pairs."""
    from tqdm import tqdm

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    records = []
    for ds, seed in tqdm([(d, s) for d in datasets for s in seeds], desc=desc, disable=None):
        f = out / f"{ds}-s{seed}.json"
        if f.is_file():
            rec = json.loads(f.read_text())
            if reuse is None or reuse(rec):
                records.append(rec)
                continue
        rec = run_one(ds, seed)
        tmp = f.with_suffix(".tmp")
        tmp.write_text(json.dumps(rec, indent=1))
        tmp.replace(f)
        records.append(rec)
    return records


def paired_table(records: list[dict[str, Any]], arms: tuple[str, str], pair: Callable[[dict[str, Any], str], Any],
                 part: str, names: tuple[str, str] | None = None, before: Sequence[Column] = (),
                 after: Sequence[Column] = (), order: Callable[[str], Any] | None = None) -> str:
    """One Markdown row per dataset: ``before``'s cells, both arms' mean AUROC / AUPRC over its seeds (``pair(record,
    arm)`` gives one seed's two figures), the mean paired change (second arm minus first), ``after``'s cells; then the
    mean change over the datasets (each dataset weighted alike) and the worst. Datasets in ``sorted`` order, by
    ``order`` where given."""
    names = names or arms
    head = ["dataset (" + part + ")", "seeds", *(c[0] for c in before), f"{names[0]} AUROC / AUPRC",
            f"{names[1]} AUROC / AUPRC", "change", *(c[0] for c in after)]
    lines = [_row(head), "|" + "---|" * len(head)]
    changes = []
    for ds in sorted({r["dataset"] for r in records}, key=order):
        rs = [r for r in records if r["dataset"] == ds]
        o, n = (np.array([pair(r, arm) for r in rs], dtype=float) for arm in arms)
        d = (n - o).mean(0)
        changes.append(d)
        cells = [ds, str(len(rs)), *(c[1](rs) for c in before), f"{o[:, 0].mean():.4f} / {o[:, 1].mean():.4f}",
                 f"{n[:, 0].mean():.4f} / {n[:, 1].mean():.4f}", f"{d[0]:+.4f} / {d[1]:+.4f}", *(c[1](rs) for c in after)]
        lines.append(_row(cells))
    if changes:
        m, w = np.mean(changes, axis=0), np.min(changes, axis=0)
        cells = ["mean over datasets", *[""] * (3 + len(before)), f"{m[0]:+.4f} / {m[1]:+.4f} (worst {w[0]:+.4f} / "
                 f"{w[1]:+.4f})", *[""] * len(after)]
        lines.append(_row(cells))
    return "\n".join(lines)


def _row(cells: Sequence[str]) -> str:
    """A Markdown table row; an empty cell is written ``| |``."""
    return "|" + "".join(f" {c} |" if c else " |" for c in cells)


def train_with_forest_view(data_dir: str, dataset: str, seed: int, out: str | Path, threads: int, epochs: int | None,
                           wrap: Callable[[Callable[..., Any]], Callable[..., Any]],
                           extra_args: Sequence[str] = ()) -> dict[str, Any]:
    """One ``gcad_dist.train`` run of ``data_dir/<dataset>.npz`` at ``seed`` (default flags but ``extra_args``; the run
    folder ``out/runs/<dataset>-s<seed>``), with :func:`gcad_dist.forest_view.add_forest_view` replaced by
    ``wrap(add_forest_view)`` for the run and restored after it; returns the run's ``metrics.json``."""
    import gcad_dist.forest_view as forest_view
    from gcad_dist.train import main as train_main

    path = Path(data_dir) / f"{dataset}.npz"
    if not path.is_file():
        raise UsageError(f"--datasets: {path} not found")
    run_dir = Path(out) / "runs" / f"{dataset}-s{seed}"
    argv = ["--graph", str(path), "--out", str(run_dir), "--seed", str(seed), "--threads", str(threads),
            "--no-plots", "--no-progress", "--overwrite", *(["--epochs", str(epochs)] if epochs is not None else []),
            *extra_args]
    real = forest_view.add_forest_view
    forest_view.add_forest_view = wrap(real)
    try:
        train_main(argv)
    finally:
        forest_view.add_forest_view = real
    return json.loads((run_dir / "metrics.json").read_text())
