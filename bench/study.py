"""A bench's study of (dataset, seed) pairs: one JSON record per pair in a folder, written whole (a crash mid-write
leaves no half file) and read back when the bench runs again, so that a stopped study resumes where it stopped.
Shared by ``bench.train_rejoin``, ``bench.forest_few`` and ``bench.forest_columns``."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script or with -m from the repo

from gcad_dist.cli import UsageError  # noqa: E402

__all__ = ["parse_seeds", "run_study"]


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
