"""The label-free default end to end on generated graphs of growing size, against the one-line baselines, same run.

    python -m bench.labelfree_scale --nodes 1000000 5000000 --device cuda --threads 16 --out /tmp/scale
    python -m bench.labelfree_scale --nodes 20000 --device cpu --threads 1 --out /tmp/scale   # small, anywhere
    python -m bench.labelfree_scale --nodes 1000000 --generator-args "--communities 47" --out /tmp/c47

For each size, the README's label-free commands, each a subprocess timed on its own (wall seconds):

1. ``partitioning.synthetic --nodes N --avg-degree 20 --seed S`` (the generator's default anomaly mix);
2. ``partitioning.build --k 1`` (the local recipe's store: the whole graph, no corruption stored);
3. ``gcad_dist.pretrain`` with default flags (one Ray Train worker; ``--gpus-per-worker 1`` with ``--device cuda``);
4. ``gcad_dist.score`` with default flags on ``--device``, and on each of ``--also-score-on`` from the same checkpoint
   (the same-run baseline of the scoring time, and a check that the devices agree); with ``--score-epochs`` also
   every earlier epoch's checkpoint of the same run (pre-training writes and keeps one per epoch), on ``--device``:
   how the scores, per kind, move as pre-training goes on (BENCHMARKS.md, session 54: at 5M nodes the cliques fade
   epoch by epoch);

then the label-free baselines of ``gcad_dist.quality`` (IsolationForest, neighbour cosine) on the same graph, in this
process. AUROC / AUPRC are over every node (a label-free run reads no label; the generator knows them all), and the
AUROC of each planted kind against the normal nodes (``--baselines`` with no name skips the baselines). A stage
that fails or passes ``--stage-timeout`` is reported as such and the next size still runs. Output: a Markdown table
on stdout and ``OUT/labelfree_scale.json``.
"""

from __future__ import annotations

import json
import logging
import os
import shlex
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script or with -m from the repo

from gcad_dist.cli import ArgumentParser, DefaultsHelpFormatter, run_cli, setup_logging  # noqa: E402

log = logging.getLogger("bench.labelfree_scale")

BASELINES = ("iforest", "nbr-cosine")


@dataclass
class LabelFreeScaleConfig:
    """Settings of ``python -m bench.labelfree_scale``."""

    nodes: list[int] = field(default_factory=lambda: [1_000_000])
    device: str = "cpu"
    also_score_on: list[str] = field(default_factory=list)
    threads: int = 1
    seed: int = 0
    avg_degree: int = 20
    out: str = "runs/labelfree_scale"
    stage_timeout: int = 900
    baselines: list[str] = field(default_factory=lambda: list(BASELINES))
    generator_args: str = ""  # more flags of partitioning.synthetic, e.g. "--communities 47"
    pretrain_args: str = ""  # more flags of gcad_dist.pretrain, e.g. "--batch-size 16384 --lr 0.004"
    score_epochs: bool = False  # also score each earlier epoch's checkpoint


#: pre-training's flags under ``--score-epochs``: a checkpoint at every epoch's end, however short (not only once a
#: minute), and all of them kept
EVERY_EPOCH = ["--checkpoint-interval", "0", "--keep-checkpoints", "10000"]


def _stage(name: str, cmd: list[str], timeout: int, log_path: Path, threads: int) -> dict[str, Any]:
    """Run one stage as a subprocess (its OpenMP / MKL threads set to ``threads``); its wall time, exit status and
    the tail of its output."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    t0 = time.perf_counter()
    try:
        with open(log_path, "w") as fh:
            rc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, timeout=timeout, check=False,
                                env=env).returncode
    except subprocess.TimeoutExpired:
        rc = "timeout"
    seconds = time.perf_counter() - t0
    tail = log_path.read_text(errors="replace").splitlines()[-3:]
    log.info("%s: %s in %.1f s%s", name, "ok" if rc == 0 else f"FAILED ({rc})", seconds,
             "" if rc == 0 else "\n  " + "\n  ".join(tail))
    return {"stage": name, "rc": rc, "seconds": round(seconds, 2), "cmd": " ".join(cmd)}


def _metrics_of(path: Path) -> dict[str, Any]:
    """What ``gcad_dist.score`` wrote beside its output (AUROC, AUPRC and the label-free choices)."""
    if not path.exists():
        return {}
    m = json.loads(path.read_text())
    keep = {k: m.get(k) for k in ("auroc", "auprc")}
    keep["score_seconds"] = m.get("seconds")  # the scoring itself, without start-up and loading
    for k in ("feature_view", "context"):
        if k in m:
            keep[k] = m[k]
    return keep


def by_kind(graph_path: Path, score: Any) -> dict[str, float]:
    """AUROC of each planted anomaly kind against the normal nodes (the generator's ``anomaly_type``); {} without it."""
    import numpy as np

    from gcad_dist.metrics import auroc
    from partitioning.synthetic import ANOMALY_TYPES

    with np.load(graph_path) as z:
        if "anomaly_type" not in z.files:
            return {}
        kind = z["anomaly_type"]
    score = np.asarray(score, dtype=np.float64)
    normal = kind == 0
    out = {}
    for code in np.unique(kind[~normal]):
        m = normal | (kind == code)
        out[ANOMALY_TYPES.get(int(code), str(code))] = round(auroc((kind[m] == code).astype(np.int8), score[m]), 4)
    return out


def _parquet_scores(path: Path) -> Any:
    """The ``score`` column of ``gcad_dist.score``'s output, in node order."""
    import numpy as np
    import pyarrow.parquet as pq

    t = pq.read_table(path, columns=["node_id", "score"])
    score = np.empty(t.num_rows, dtype=np.float64)
    score[t.column("node_id").to_numpy()] = t.column("score").to_numpy()
    return score


def _baselines(graph_path: Path, names: list[str], seed: int, threads: int) -> list[dict[str, Any]]:
    """Fit the label-free baselines on the graph; AUROC / AUPRC over every node and the fit's seconds."""
    from gcad_dist.detectors import fit_score
    from gcad_dist.metrics import auprc, auroc
    from partitioning.io import load_graph

    g = load_graph(graph_path)
    data = g.to_data()
    rows = []
    for name in names:
        t0 = time.perf_counter()
        s = fit_score(name, data, None, seed, threads=threads, device="cpu")
        rows.append({"model": name, "auroc": auroc(g.y, s), "auprc": auprc(g.y, s),
                     "seconds": round(time.perf_counter() - t0, 2), "by_kind": by_kind(graph_path, s)})
        log.info("%s: AUROC %.4f in %.1f s", name, rows[-1]["auroc"], rows[-1]["seconds"])
    return rows


def epoch_checkpoints(pre: Path) -> list[Path]:
    """Pre-training's Ray checkpoints in ``pre/ray_train`` but the last (``final`` is that one), oldest first: one per
    epoch (their names carry the time they were written), unless ``--pretrain-args`` asks for ``--checkpoint-every``,
    which adds checkpoints within an epoch."""
    from gcad_dist.checkpoint import checkpoint_dirs

    return [p for p in checkpoint_dirs(pre / "ray_train") if (p / "model.pt").exists()][:-1]


def _score(cfg: LabelFreeScaleConfig, rec: dict[str, Any], graph: Path, ckpt: Path, dev: str, tag: str, name: str,
           row: dict[str, Any]) -> None:
    """``gcad_dist.score`` of ``ckpt`` on ``dev`` as stage "score ``tag``" (files ``scores_<name>.parquet`` and
    ``score_<name>.log`` in the size's folder); ``row`` with its seconds, metrics and AUROC by kind joins the scores."""
    d = graph.parent
    s_out = d / f"scores_{name}.parquet"
    r = _stage(f"score {tag}", [sys.executable, "-m", "gcad_dist.score", "--checkpoint", str(ckpt),
                                "--graph", str(graph), "--out", str(s_out), "--device", dev,
                                "--threads", str(cfg.threads)],
               cfg.stage_timeout, d / f"score_{name}.log", cfg.threads)
    rec["stages"].append(r)
    rec["scores"].append({**row, "seconds": r["seconds"], **_metrics_of(Path(str(s_out) + ".metrics.json"))})
    if s_out.exists():
        rec["scores"][-1]["by_kind"] = by_kind(graph, _parquet_scores(s_out))


def run(cfg: LabelFreeScaleConfig) -> list[dict[str, Any]]:
    """Every size's stages, scores and baselines (one record per size)."""
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    py = sys.executable
    gpu = cfg.device.startswith("cuda")
    records = []
    for n in cfg.nodes:
        d = out / f"n{n}"
        d.mkdir(exist_ok=True)
        graph, store, pre = d / "graph.npz", d / "whole.zarr", d / "pre"
        rec: dict[str, Any] = {"nodes": n, "device": cfg.device, "threads": cfg.threads, "stages": [], "scores": []}
        stages = [
            ("generate", [py, "-m", "partitioning.synthetic", "--nodes", str(n), "--avg-degree", str(cfg.avg_degree),
                          "--seed", str(cfg.seed), "--out", str(graph), *shlex.split(cfg.generator_args)]),
            ("build --k 1", [py, "-m", "partitioning.build", "--graph", str(graph), "--out", str(store), "--k", "1",
                             "--threads", str(cfg.threads), "--no-plot", "--no-progress", "--overwrite"]),
            ("pretrain", [py, "-m", "gcad_dist.pretrain", "--store", str(store), "--out", str(pre), "--workers", "1",
                          "--cpus-per-worker", str(cfg.threads), "--gpus-per-worker", "1" if gpu else "0",
                          "--seed", str(cfg.seed), "--no-progress", "--overwrite",
                          *(EVERY_EPOCH if cfg.score_epochs else []),
                          *shlex.split(cfg.pretrain_args)]),
        ]
        ok = True
        for name, cmd in stages:
            r = _stage(name, cmd, cfg.stage_timeout, d / f"{name.split()[0]}.log", cfg.threads)
            rec["stages"].append(r)
            if r["rc"] != 0:
                ok = False
                break
        if ok:
            for dev in [cfg.device, *cfg.also_score_on]:
                _score(cfg, rec, graph, pre / "final", dev, f"on {dev}", dev.replace(":", ""),
                       {"model": "gccad-pre", "device": dev})
            for k, ckpt in enumerate(epoch_checkpoints(pre) if cfg.score_epochs else [], start=1):
                _score(cfg, rec, graph, ckpt, cfg.device, f"epoch {k}", f"epoch{k}", {"model": f"gccad-pre, epoch {k}"})
        if graph.exists() and cfg.baselines:
            rec["scores"] += _baselines(graph, cfg.baselines, cfg.seed, cfg.threads)
        records.append(rec)
        (out / "labelfree_scale.json").write_text(json.dumps(records, indent=1, default=str))
    return records


def table(records: list[dict[str, Any]]) -> str:
    """Markdown: per size, each stage's seconds, then each score's AUROC / AUPRC and seconds."""
    lines = ["| nodes | what | seconds | AUROC / AUPRC | note |", "|---|---|---|---|---|"]
    for rec in records:
        for s in rec["stages"]:
            if s["stage"].startswith("score"):
                continue
            lines.append(f"| {rec['nodes']:,} | {s['stage']} ({rec['device']}) | {s['seconds']:.1f} | | "
                         f"{'' if s['rc'] == 0 else 'FAILED: ' + str(s['rc'])} |")
        base = next((s["seconds"] for s in rec["scores"] if s.get("model") == "gccad-pre"), None)
        for s in rec["scores"]:
            m = "" if s.get("auroc") is None else f"{s['auroc']:.4f} / {s['auprc']:.4f}"
            what = f"score: {s['model']}" + (f" on {s['device']}" if "device" in s else "")
            note = ""
            if "device" in s and base and s["device"] != rec["device"]:
                note = f"{s['seconds'] / base:.2f}x the {rec['device']} scoring time"
            if isinstance(s.get("context"), dict):
                note += f" context: {s['context'].get('context')};"
            if isinstance(s.get("feature_view"), dict):
                note += " feature view " + ("joined" if s["feature_view"].get("used") else "off")
            if s.get("score_seconds") is not None:
                note += f"; {s['score_seconds']:.1f} s scoring"
            if s.get("by_kind"):
                note += "; by kind: " + ", ".join(f"{k} {v:.3f}" for k, v in s["by_kind"].items())
            note = note.strip().lstrip(";").strip()
            lines.append(f"| {rec['nodes']:,} | {what} | {s['seconds']:.1f} | {m} | {note} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = ArgumentParser(prog="python -m bench.labelfree_scale", description=__doc__.split("\n\n")[0],
                       formatter_class=DefaultsHelpFormatter)
    p.add_argument("--nodes", type=int, nargs="+", default=[1_000_000], help="graph sizes to generate and run")
    p.add_argument("--device", default="cpu", help="cpu or cuda: pre-training's worker and the scoring device")
    p.add_argument("--also-score-on", nargs="*", default=[], help="score the same checkpoint on these devices too")
    p.add_argument("--threads", type=int, default=1, help="CPU threads of every stage")
    p.add_argument("--seed", type=int, default=0, help="generator and pre-training seed")
    p.add_argument("--avg-degree", type=int, default=20, help="the generator's average degree")
    p.add_argument("--out", default="runs/labelfree_scale", help="folder for graphs, stores, checkpoints and JSON")
    p.add_argument("--stage-timeout", type=int, default=900, help="seconds before a stage is stopped")
    p.add_argument("--baselines", nargs="*", default=list(BASELINES), help="label-free baselines of the harness")
    p.add_argument("--generator-args", default="", help="more flags of partitioning.synthetic, e.g. '--communities 47'")
    p.add_argument("--pretrain-args", default="", help="more flags of gcad_dist.pretrain, e.g. "
                   "'--batch-size 16384 --lr 0.004' (the GPU recipe on a CPU)")
    p.add_argument("--score-epochs", action="store_true",
                   help="also score each earlier epoch's checkpoint of pre-training (on --device), per kind")
    p.add_argument("-v", "--verbose", action="store_true")
    a = p.parse_args(argv)
    setup_logging(a.verbose)
    cfg = LabelFreeScaleConfig(nodes=a.nodes, device=a.device, also_score_on=a.also_score_on, threads=a.threads,
                               seed=a.seed, avg_degree=a.avg_degree, out=a.out, stage_timeout=a.stage_timeout,
                               baselines=a.baselines, generator_args=a.generator_args, pretrain_args=a.pretrain_args,
                               score_epochs=a.score_epochs)
    records = run(cfg)
    print(table(records))
    log.info("JSON: %s (settings %s)", Path(cfg.out) / "labelfree_scale.json", asdict(cfg))


if __name__ == "__main__":
    run_cli(main)
