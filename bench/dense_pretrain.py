"""Pre-training on a dense graph: whole-graph steps over every link against the default's capped contexts, same run.

    python -m bench.dense_pretrain --out /tmp/dense                 # 12,000 nodes of mean degree 700, timed steps
    python -m bench.dense_pretrain --out /tmp/dense --full --seeds 0 1   # also 3-epoch runs, scored (AUROC / AUPRC)

A graph of few nodes and many links (Amazon's co-review graph: 12k nodes, 8.8M links) is pre-trained with
whole-graph steps (it is under ``--sample-threshold`` nodes), and a whole-graph step of the local contrast costs
every link. Since session 56 a step above ``--dense-links`` links averages each node's context over at most about
``--max-degree`` in-neighbours, drawn afresh (:func:`gcad_dist.data.degree_cap.cap_dense_step`). Here, on the graph
``partitioning.synthetic --nodes 12000 --avg-degree 700`` (or ``--graph``) and its ``partitioning.build --k 1``
store, each mode is a ``gcad_dist.pretrain`` subprocess of one worker:

* ``every link``: ``--dense-links`` above the graph's links (the behaviour before session 56), the same-run baseline;
* ``capped``: the defaults (``--dense-links`` as given here, pre-training's default unless said);
* ``capped, --max-degree N``: with ``--max-degrees N ...``, the same with each other cap, to weigh a cap's time.

Timed: ``--steps`` steps of one epoch (seconds a step between the run's first and last progress events: without Ray's
start-up and the first step's loading), and the ratio to the baseline; the steps of a default epoch in each mode (the
plan the training loop follows: since session 57 a capped step costs the links it trains on, so a dense store's epoch
is ``--min-steps-per-epoch``'s ~100 steps, like any whole-graph store's) and their seconds. With ``--full``: also each
mode's default 3-epoch run per ``--seeds`` seed (wall seconds), scored by ``gcad_dist.score`` (AUROC / AUPRC over
every node, no label read). Output: a Markdown table and ``OUT/dense_pretrain.json``.
"""

from __future__ import annotations

import json
import logging
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script or with -m from the repo

from bench.labelfree_scale import _metrics_of, _stage  # noqa: E402
from gcad_dist.cli import ArgumentParser, DefaultsHelpFormatter, UsageError, run_cli, setup_logging  # noqa: E402

log = logging.getLogger("bench.dense_pretrain")

#: each mode's extra flags of gcad_dist.pretrain: the baseline first (``--max-degrees`` adds capped modes)
MODES = {"every link (before)": ["--dense-links", str(10**15)], "capped (default)": []}


@dataclass
class DensePretrainConfig:
    """Settings of ``python -m bench.dense_pretrain``."""

    out: str = "runs/dense_pretrain"
    graph: str | None = None  # an .npz graph; None = generate one (nodes, avg_degree)
    nodes: int = 12_000
    avg_degree: int = 700
    steps: int = 30
    full: bool = False
    seeds: list[int] = field(default_factory=lambda: [0])
    threads: int = 1
    stage_timeout: int = 3600
    dense_links: int | None = None  # the capped modes' --dense-links; None = pre-training's default
    max_degrees: list[int] = field(default_factory=list)  # capped modes beside the default's, one per cap


def modes(cfg: DensePretrainConfig) -> dict[str, list[str]]:
    """Each mode's extra flags of gcad_dist.pretrain, the baseline first: every link, the default cap, then one capped
    mode per ``cfg.max_degrees`` cap (``--dense-links`` as ``cfg.dense_links`` in every capped mode)."""
    dense = [] if cfg.dense_links is None else ["--dense-links", str(cfg.dense_links)]
    out = {name: (extra or dense) for name, extra in MODES.items()}
    for cap in cfg.max_degrees:
        out[f"capped, --max-degree {cap}"] = [*dense, "--max-degree", str(cap)]
    return out


def _pretrain(cfg: Any, store: Path, out: Path, extra: list[str], seed: int,
              steps: int | None, workers: int = 1) -> dict[str, Any]:
    """One ``gcad_dist.pretrain`` subprocess of ``workers`` workers of ``cfg.threads`` threads (``steps``: one epoch
    of that many steps): its stage record, training seconds, steady seconds a step and the epoch's planned steps."""
    py = sys.executable
    cmd = [py, "-m", "gcad_dist.pretrain", "--store", str(store), "--out", str(out), "--workers", str(workers),
           "--cpus-per-worker", str(cfg.threads), "--gpus-per-worker", "0", "--seed", str(seed), "--no-progress",
           "--overwrite", *extra]
    if steps:
        cmd += ["--epochs", "1", "--max-steps-per-epoch", str(steps)]
    r = _stage(f"pretrain {out.name}", cmd, cfg.stage_timeout, out.parent / f"{out.name}.log", cfg.threads)
    m = out / "metrics.json"
    if r["rc"] == 0 and m.exists():
        r["train_seconds"] = sum(h["time_s"] for h in json.loads(m.read_text())["history"])
        r["s_per_step"] = steady_step_seconds(out / "events.jsonl")
    r["steps_per_epoch"] = epoch_steps(store, extra)
    return r


def epoch_steps(store: Path, extra: list[str]) -> int:
    """Steps of a default epoch of one worker on ``store`` with pre-training's ``extra`` flags: the training loop's
    own plan (:func:`gcad_dist.distributed.train_loop.shard_config`, :func:`gcad_dist.data.sharding.epoch_plan`)."""
    from gcad_dist.data.sharding import epoch_plan
    from gcad_dist.distributed.train_loop import shard_config
    from gcad_dist.pretrain import apply_auto_batch, apply_recipe, parse_config
    from partitioning.store.reader import StoreReader

    reader = StoreReader(str(store), verify=False)
    cfg = parse_config(["--store", str(store), "--out", str(store.parent / "unused"), *extra])
    apply_recipe(cfg, reader.num_corrupted > 0)
    apply_auto_batch(cfg, int(min(reader.node_counts)))
    return len(epoch_plan(reader.node_counts, reader.edge_counts, 0, 1, 0, shard_config(cfg)))


def steady_step_seconds(events: Path) -> float | None:
    """Seconds a step between the run's first and last progress events (the first step, which loads the store and
    warms up, is left out); None with fewer than two."""
    pr = [e for e in map(json.loads, events.read_text().splitlines()) if e.get("event") == "progress"]
    if len(pr) < 2 or pr[-1]["step"] <= pr[0]["step"]:
        return None
    return (pr[-1]["time"] - pr[0]["time"]) / (pr[-1]["step"] - pr[0]["step"])


def graph_and_store(cfg: Any, out: Path) -> tuple[Path, Path]:
    """(graph, whole-graph store): ``cfg.graph``, or a graph of ``cfg.nodes`` nodes of mean degree ``cfg.avg_degree``
    generated into ``out``; its ``partitioning.build --k 1`` store in ``out/whole.zarr``."""
    py = sys.executable
    if cfg.graph:
        graph = Path(cfg.graph)
        if not graph.exists():
            raise UsageError(f"--graph: {graph} does not exist")
    else:
        graph = out / "graph.npz"
        r = _stage("generate", [py, "-m", "partitioning.synthetic", "--nodes", str(cfg.nodes), "--avg-degree",
                                str(cfg.avg_degree), "--seed", "0", "--out", str(graph)], cfg.stage_timeout,
                   out / "generate.log", cfg.threads)
        if r["rc"] != 0:
            raise UsageError(f"generating the graph failed; see {out / 'generate.log'}")
    store = out / "whole.zarr"
    r = _stage("build --k 1", [py, "-m", "partitioning.build", "--graph", str(graph), "--out", str(store), "--k", "1",
                               "--threads", str(cfg.threads), "--no-plot", "--no-progress", "--overwrite"],
               cfg.stage_timeout, out / "build.log", cfg.threads)
    if r["rc"] != 0:
        raise UsageError(f"building the store failed; see {out / 'build.log'}")
    return graph, store


def full_runs(cfg: Any, graph: Path, store: Path, out: Path, i: int, extra: list[str],
              workers: int = 1) -> list[dict[str, Any]]:
    """Mode ``i``'s default 3-epoch run per ``cfg.seeds`` seed, each scored by ``gcad_dist.score`` (AUROC / AUPRC
    against the graph's labels, which no run reads)."""
    rows = []
    for seed in cfg.seeds:
        pre = out / f"full{i}_s{seed}"
        f = _pretrain(cfg, store, pre, extra, seed, None, workers)
        s_out = out / f"scores{i}_s{seed}.parquet"
        sc = _stage(f"score {pre.name}", [sys.executable, "-m", "gcad_dist.score", "--checkpoint", str(pre / "final"),
                                           "--graph", str(graph), "--out", str(s_out), "--threads", str(cfg.threads)],
                    cfg.stage_timeout, out / f"score{i}_s{seed}.log", cfg.threads)
        rows.append({"seed": seed, "pretrain": f, "score": sc, **_metrics_of(Path(str(s_out) + ".metrics.json"))})
    return rows


def run(cfg: DensePretrainConfig) -> dict[str, Any]:
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    graph, store = graph_and_store(cfg, out)
    rows = []
    for i, (mode, extra) in enumerate(modes(cfg).items()):
        rows.append({"mode": mode, "timed": _pretrain(cfg, store, out / f"timed{i}", extra, 0, cfg.steps),
                     "full": full_runs(cfg, graph, store, out, i, extra) if cfg.full else []})
    result = {"settings": asdict(cfg), "graph": str(graph), "rows": rows}
    (out / "dense_pretrain.json").write_text(json.dumps(result, indent=1))
    return result


def table(result: dict[str, Any]) -> str:
    """Markdown: each mode's seconds a step, steps and seconds an epoch, and their ratios to the baseline; with --full,
    each seed's run and scores."""
    rows = result["rows"]

    def epoch_s(t: dict[str, Any]) -> float | None:
        sps, n = t.get("s_per_step"), t.get("steps_per_epoch")
        return sps * n if sps and n else None

    base, base_epoch = rows[0]["timed"].get("s_per_step"), epoch_s(rows[0]["timed"])
    lines = ["| mode | s / step | steps / epoch | s / epoch | vs every link: step, epoch "
             "| 3-epoch runs: seed: pre-training s, AUROC / AUPRC |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        t = r["timed"]
        sps, eps = t.get("s_per_step"), epoch_s(t)
        if r is rows[0]:
            ratio = "baseline" if sps else "failed" if t["rc"] else ""
        elif sps and base:
            ratio = f"{base / sps:.1f}x, " + (f"{base_epoch / eps:.1f}x faster" if eps and base_epoch else "")
        else:
            ratio = "failed" if t["rc"] else ""
        full = full_cell(r["full"])
        lines.append(f"| {r['mode']} | {'' if sps is None else f'{sps:.3f}'} | {t.get('steps_per_epoch', '')} "
                     f"| {'' if eps is None else f'{eps:.0f}'} | {ratio} | {full} |")
    return "\n".join(lines)


def add_run_options(p: ArgumentParser, d: Any) -> None:
    """The options of a bench that times modes of ``gcad_dist.pretrain`` on one graph (defaults from settings ``d``)."""
    p.add_argument("--out", default=d.out, help="folder for the graph, store, runs and JSON")
    p.add_argument("--graph", default=None, help="an .npz graph to use instead of generating one")
    p.add_argument("--nodes", type=int, default=d.nodes, help="nodes of the generated graph")
    p.add_argument("--avg-degree", type=int, default=d.avg_degree, help="mean degree of the generated graph")
    p.add_argument("--steps", type=int, default=d.steps, help="steps timed in each mode")
    p.add_argument("--full", action="store_true", help="also each mode's default 3-epoch run, scored")
    p.add_argument("--seeds", type=int, nargs="+", default=d.seeds, help="pre-training seeds of the --full runs")
    p.add_argument("--threads", type=int, default=d.threads, help="CPU threads of each worker and stage")
    p.add_argument("--stage-timeout", type=int, default=d.stage_timeout, help="seconds before a stage is stopped")


def full_cell(full: list[dict[str, Any]]) -> str:
    """A table cell of a mode's scored 3-epoch runs (:func:`full_runs`): seed: pre-training s, AUROC / AUPRC."""
    return "; ".join(f"{f['seed']}: {f['pretrain'].get('train_seconds', float('nan')):.0f} s, "
                     + (f"{f['auroc']:.4f} / {f['auprc']:.4f}" if f.get("auroc") is not None else "failed")
                     for f in full)


def main(argv: list[str] | None = None) -> None:
    d = DensePretrainConfig()
    p = ArgumentParser(prog="python -m bench.dense_pretrain", description=__doc__.split("\n\n")[0],
                       formatter_class=DefaultsHelpFormatter)
    add_run_options(p, d)
    p.add_argument("--dense-links", type=int, default=None,
                   help="the capped modes' pretrain --dense-links (default: pre-training's)")
    p.add_argument("--max-degrees", type=int, nargs="+", default=[], metavar="CAP",
                   help="also a capped mode for each of these pretrain --max-degree caps (to compare with the "
                        "default's)")
    p.add_argument("-v", "--verbose", action="store_true")
    a = p.parse_args(argv)
    setup_logging(a.verbose)
    if a.steps < 1 or a.nodes < 2 or a.avg_degree < 1 or a.threads < 1 or min(a.max_degrees, default=1) < 1:
        raise UsageError("--steps, --avg-degree, --threads and --max-degrees must be >= 1 and --nodes >= 2")
    cfg = DensePretrainConfig(out=a.out, graph=a.graph, nodes=a.nodes, avg_degree=a.avg_degree, steps=a.steps,
                              full=a.full, seeds=a.seeds, threads=a.threads, stage_timeout=a.stage_timeout,
                              dense_links=a.dense_links, max_degrees=a.max_degrees)
    result = run(cfg)
    print(table(result))
    log.info("JSON: %s", Path(cfg.out) / "dense_pretrain.json")


if __name__ == "__main__":
    run_cli(main)
