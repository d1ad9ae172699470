"""gcad_dist.quality: runs are keyed by every result-affecting setting (a rerun with other settings into the
same --out trains anew and its table never shows the old figures), the run JSON carries its settings, and
the reference detectors run on the GNNs' splits."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    from partitioning.io import save_npz
    from partitioning.synthetic import SyntheticConfig, generate

    path = tmp_path_factory.mktemp("q") / "tiny.npz"
    save_npz(generate(SyntheticConfig(nodes=200, avg_degree=6, features=8, anomaly_fraction=0.1, seed=0)), path)
    return path


def _run(args: list[str], capsys) -> tuple[int, str]:
    from gcad_dist import quality
    from gcad_dist.cli import run_cli

    capsys.readouterr()
    with pytest.raises(SystemExit) as exc:
        run_cli(quality.main, args)
    return int(exc.value.code or 0), capsys.readouterr().out


def _runs(out: Path, model: str) -> list[Path]:
    return sorted((out / "runs" / "tiny" / model).rglob("seed*.json"))


def test_rerun_with_other_settings_trains_again(tiny, tmp_path, capsys, caplog):
    out = tmp_path / "q"
    base = ["--datasets", str(tiny), "--seeds", "1", "--models", "gccad", "mlp", "--epochs", "2", "--hidden", "8",
            "--threads", "1", "--out", str(out)]
    rc, first = _run(base + ["--score-space", "encoder"], capsys)
    assert rc == 0
    (enc,) = _runs(out, "gccad")
    run = json.loads(enc.read_text())
    assert run["settings"]["train"]["score_space"] == "encoder" and run["settings"]["train"]["epochs"] == 2
    assert run["settings"]["data_sha256"] and run["settings"]["results_version"]
    assert run["settings_key"] == enc.parent.name

    caplog.set_level("INFO", logger="gcad_dist.quality")
    rc, second = _run(base + ["--score-space", "projection"], capsys)
    assert rc == 0
    assert "1 runs to do (1 already done)" in caplog.text  # gccad trains again; mlp ignores the score space
    runs = _runs(out, "gccad")
    assert len(runs) == 2 and len(_runs(out, "mlp")) == 1
    proj = next(p for p in runs if p != enc)
    assert json.loads(proj.read_text())["settings"]["train"]["score_space"] == "projection"

    def row(md: str, model: str) -> str:
        return next(line for line in md.splitlines() if line.startswith(f"| {model} |"))

    assert "score space projection" in second
    proj_auroc = json.loads(proj.read_text())["test"]["auroc"]
    enc_auroc = run["test"]["auroc"]
    assert f"{proj_auroc:.4f}" in row(second, "gccad")
    if f"{enc_auroc:.4f}" != f"{proj_auroc:.4f}":
        assert f"{enc_auroc:.4f}" not in row(second, "gccad")
    assert row(first, "mlp") == row(second, "mlp")
    # each run records where it was computed, and the report names it (one environment, both runs of this call)
    assert run["environment"]["packages"]["torch"] == torch.__version__
    assert f"torch {torch.__version__}" in second and "(2 runs)" in second.split("Environment of the runs:")[1]



def test_table_ignores_runs_with_other_settings(tiny, tmp_path, capsys):
    """A run JSON under the current key whose stored settings differ (e.g. edited by hand) is not shown."""
    out = tmp_path / "q"
    args = ["--datasets", str(tiny), "--seeds", "1", "--models", "mlp", "--epochs", "2", "--hidden", "8",
            "--threads", "1", "--out", str(out)]
    assert _run(args, capsys)[0] == 0
    (p,) = _runs(out, "mlp")
    run = json.loads(p.read_text())
    run["settings"]["train"]["epochs"] = 999
    run["test"]["auroc"] = 0.123456
    p.write_text(json.dumps(run))
    rc, md = _run(args + ["--report-only"], capsys)
    assert rc == 2 and "0.1235" not in md  # the only run is not shown, and an empty report is an error


def test_report_only_says_what_is_missing(tiny, tmp_path, capsys, caplog):
    """--report-only on a folder without runs is a one-line error; with fewer seeds cached than asked for, the
    table is built and a warning names the seeds it holds."""
    out = tmp_path / "q"
    base = ["--datasets", str(tiny), "--models", "mlp", "--epochs", "2", "--hidden", "8", "--threads", "1",
            "--out", str(out)]
    capsys.readouterr()
    from gcad_dist import quality
    from gcad_dist.cli import run_cli

    with pytest.raises(SystemExit) as exc:
        run_cli(quality.main, base + ["--seeds", "1", "--report-only"])
    assert exc.value.code == 2 and "holds no finished run" in capsys.readouterr().err
    assert _run(base + ["--seeds", "1"], capsys)[0] == 0
    with caplog.at_level("WARNING", logger="gcad_dist.quality"):
        rc, md = _run(base + ["--seeds", "2", "--report-only"], capsys)
    assert rc == 0 and "| mlp | train+val |" in md
    assert "1 of the 2 seeds asked for are in the table (seeds [0])" in caplog.text


def test_run_key_covers_result_settings(tiny):
    from gcad_dist.quality import QualityConfig, run_settings, settings_key

    def key(model: str, **kw) -> str:
        return settings_key(run_settings(QualityConfig(**kw), "tiny", tiny, model))

    assert key("gccad") == key("gccad")
    for kw in ({"score_space": "encoder"}, {"link_eval": "threshold"}, {"conv": "gcn"}, {"hidden": 32}, {"layers": 3}, {"epochs": 7},
               {"lr": 5e-3}, {"eval_every": 2}, {"patience": 7}):
        assert key("gccad", **kw) != key("gccad"), kw
    assert key("mlp", score_space="encoder", link_eval="threshold") == key("mlp")  # GCCAD-only settings
    assert key("mlp", hidden=32) != key("mlp")
    assert key("iforest", epochs=7, hidden=32) == key("iforest")  # GNN settings do not touch detectors
    assert key("gccad-pre", pre_epochs=5) != key("gccad-pre") == key("gccad-pre", pre_epochs=3)  # 3 = the recipe's
    assert key("gccad-pre-paper", pre_epochs=10) == key("gccad-pre-paper") != key("gccad-pre")
    # label inputs: GCCAD's default (keyed), the others' option (absent when off, as in every earlier run's key)
    assert run_settings(QualityConfig(), "tiny", tiny, "gccad")["train"]["label_inputs"] == \
        "from 10 labelled training anomalies"  # the count rule (session 32): not session 31's "on for any labels"
    assert len({key("gccad", label_inputs=False), key("gccad"), key("gccad", label_inputs=True)}) == 3
    for model in ("sage", "trees"):
        assert key(model, label_inputs=True) != key(model) == key(model, label_inputs=False), model
    assert key("iforest", label_inputs=True) == key("iforest")
    assert "label_inputs" not in run_settings(QualityConfig(), "tiny", tiny, "sage")["train"]
    # session 33 lends training anomalies only: a key of its own, so sessions 31-32's runs (each class lent) are not reused
    assert run_settings(QualityConfig(), "tiny", tiny, "gccad")["train"]["label_lends"] == "anomalies"
    assert run_settings(QualityConfig(label_inputs=True), "tiny", tiny, "sage")["train"]["label_lends"] == "anomalies"
    assert "label_lends" not in run_settings(QualityConfig(label_inputs=False), "tiny", tiny, "gccad")["train"]
    assert "label_inputs" not in run_settings(QualityConfig(), "tiny", tiny, "trees")["detector"]
    # the paper's recipe keeps the run key of earlier sessions' gccad-pre (its stored runs stay valid)
    paper = run_settings(QualityConfig(), "tiny", tiny, "gccad-pre-paper")["detector"]
    assert paper["pre_epochs"] == 10 and paper["context"] == "halo" and "recipe" not in paper
    assert key("iforest") != key("nbr-cosine")
    # the contrast (auto, the default, names its selection rule) keys GCCAD runs only
    settings = run_settings(QualityConfig(), "tiny", tiny, "gccad")
    assert settings["train"]["contrast"] == "auto" and "bootstrap" in settings["train"]["contrast_rule"]
    assert "contrast" not in run_settings(QualityConfig(contrast="graph"), "tiny", tiny, "gccad")["train"]
    assert key("gccad", contrast="ego") != key("gccad") != key("gccad", contrast="graph")
    assert key("mlp", contrast="graph") == key("mlp")
    # jumping knowledge: the default is cat for gccad (keyed) and last for gccad-ce (no key: earlier runs stay valid)
    assert run_settings(QualityConfig(), "tiny", tiny, "gccad")["train"]["jump"] == "cat"
    assert key("gccad", jump="cat") == key("gccad") != key("gccad", jump="last")
    assert "jump" not in run_settings(QualityConfig(), "tiny", tiny, "gccad-ce")["train"]
    assert key("gccad-ce", jump="last") == key("gccad-ce") != key("gccad-ce", jump="cat")
    assert key("mlp", jump="cat") == key("mlp")
    # the norm keys every GNN when it is not LayerNorm (earlier runs stay valid); auto's candidates key GCCAD runs
    assert "norm" not in run_settings(QualityConfig(), "tiny", tiny, "gin")["train"]
    assert key("gin", norm="graph") != key("gin") and key("gccad", norm="graph") != key("gccad")
    assert settings["train"]["auto_candidates"] == [["graph", "layer"], ["ego", "layer"], ["graph", "graph"]]
    assert "auto_candidates" not in run_settings(QualityConfig(contrast="graph"), "tiny", tiny, "gccad")["train"]
    # the in-degree cap keys GCCAD runs (absent = 0, every edge: runs before session 24 stay valid), not the baselines
    assert settings["train"]["max_degree"] == 64
    assert "max_degree" not in run_settings(QualityConfig(max_degree=0), "tiny", tiny, "gccad")["train"]
    assert key("gccad", max_degree=32) != key("gccad") != key("gccad", max_degree=0)
    assert key("gin", max_degree=32) == key("gin") and "max_degree" not in run_settings(QualityConfig(), "tiny", tiny, "gin")["train"]
    # input dropout keys the runs that have it (absent = 0: runs before session 28 stay valid); GCCAD's default 0.2,
    # the baselines' 0 (their runs keep their keys)
    assert "labelled training anomalies per input feature" in settings["train"]["input_dropout"] and "input_dropout" not in run_settings(QualityConfig(), "tiny", tiny, "gin")["train"]
    assert "input_dropout" not in run_settings(QualityConfig(input_dropout=0.0), "tiny", tiny, "gccad")["train"]
    assert key("gccad", input_dropout=0.5) != key("gccad") != key("gccad", input_dropout=0.2)  # the rule is a setting
    assert key("mlp", input_dropout=0.5) != key("mlp") == key("mlp", input_dropout=0.0)
    graph_norm = run_settings(QualityConfig(norm="graph"), "tiny", tiny, "gccad")["train"]
    assert graph_norm["auto_candidates"] == [["graph", "graph"], ["ego", "graph"]] and graph_norm["norm"] == "graph"


def test_table_counts_the_contrast_each_seed_kept():
    from gcad_dist.quality import markdown_tables

    run = {"test": {"auroc": 0.8, "auprc": 0.5, "recall_at_k": 0.5}, "val": {"auprc": 0.5}, "wall_seconds": 1.0}
    runs = [dict(run, contrast_selection={"chosen": c}) for c in ("graph", "ego", "graph")]
    text = markdown_tables({("tiny", "gccad"): runs, ("tiny", "mlp"): [run]}, ["tiny"], ["gccad", "mlp"])
    assert "gccad: candidates kept on validation (3 seeds): ego 1, graph 2." in text
    assert "mlp: contrast" not in text


def test_environments_line_counts_each_build():
    from gcad_dist.quality import environments_line

    def run(torch_version, native):
        return {"environment": {"packages": {"torch": torch_version}, "cpu": "X", "torch_cpu_capability": "AVX2",
                                "native_kernels": native}}

    line = environments_line({("g", "gccad"): [run("2.13.0", "loaded gcad_native_a"), run("2.13.0", "loaded gcad_native_a"),
                                               run("2.12.0", "off"), {}], ("g", "mlp"): []})
    assert line.startswith("Environment of the runs: torch 2.13.0; CPU X (AVX2); native kernels gcad_native_a (2 runs)")
    assert "; or torch 2.12.0; CPU X (AVX2); native kernels off (1 run)" in line
    assert line.rstrip().endswith("; or not recorded (1 run).")
    assert environments_line({}) == "Environment of the runs: no runs.\n"


def test_paired_table_compares_seed_by_seed():
    import numpy as np

    from gcad_dist.quality import paired_tables

    def run(seed, auroc, auprc):
        return {"seed": seed, "test": {"auroc": auroc, "auprc": auprc, "recall_at_k": 0.0}}

    # gccad is ahead of mlp on seeds 0 and 2 in AUROC, behind on seed 1; mlp has no seed 3
    results = {("g", "gccad"): [run(0, 0.8, 0.5), run(1, 0.6, 0.4), run(2, 0.9, 0.3), run(3, 0.7, 0.2)],
               ("g", "mlp"): [run(0, 0.7, 0.5), run(1, 0.7, 0.2), run(2, 0.8, 0.1)],
               ("g", "gat"): []}
    text = paired_tables(results, ["g"], ["gccad", "mlp", "gat"], "gccad")
    row = next(line for line in text.splitlines() if line.startswith("| g | mlp |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[2] == "3"  # the seeds both ran
    d = np.array([0.1, -0.1, 0.1])
    assert cells[3] == f"{d.mean():+.4f} ± {d.std(ddof=1):.4f}" and cells[4] == "2/3"
    assert cells[5].startswith("+0.1333") and cells[6] == "2/3"  # AUPRC: 0.0 is not ahead
    assert "| g | gat |" not in text and "| g | gccad |" not in text


def test_paired_with_must_be_run():
    from gcad_dist.cli import UsageError
    from gcad_dist.quality import main

    with pytest.raises(UsageError, match="--paired-with"):
        main(["--models", "mlp", "--paired-with", "gcn", "--datasets", "x", "--data-dir", "/nonexistent"])


def test_run_key_covers_dataset_content(tiny, tmp_path):
    import os
    import shutil

    from gcad_dist.quality import QualityConfig, run_settings, settings_key
    from partitioning.io import save_npz
    from partitioning.synthetic import SyntheticConfig, generate

    g = tmp_path / "tiny.npz"
    shutil.copy(tiny, g)
    before = settings_key(run_settings(QualityConfig(), "tiny", g, "mlp"))
    save_npz(generate(SyntheticConfig(nodes=200, avg_degree=6, features=8, anomaly_fraction=0.1, seed=1)), g)
    os.utime(g, ns=(1, 1))
    assert settings_key(run_settings(QualityConfig(), "tiny", g, "mlp")) != before


def test_missing_pygod_skips_with_one_line(tiny, tmp_path, capsys, caplog, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "pygod", None)
    out = tmp_path / "q"
    base = ["--datasets", str(tiny), "--seeds", "1", "--threads", "1", "--out", str(out)]
    rc, md = _run(base + ["--models", "iforest", "dominant"], capsys)
    assert rc == 0 and "skipping dominant" in caplog.text and "baselines" in caplog.text
    assert "| dominant | none | not run:" in md and "| iforest | none | 0." in md
    from gcad_dist import quality
    from gcad_dist.cli import run_cli

    with pytest.raises(SystemExit) as exc:
        run_cli(quality.main, base + ["--models", "cola"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.startswith("error: --models: cola needs") and err.count("\n") == 1


def test_detectors_in_the_harness(tiny, tmp_path, capsys):
    out = tmp_path / "q"
    rc, md = _run(["--datasets", str(tiny), "--seeds", "2", "--models", "iforest", "nbr-cosine", "trees", "mlp",
                   "--epochs", "2", "--hidden", "8", "--threads", "1", "--out", str(out)], capsys)
    assert rc == 0
    assert "| iforest | none |" in md and "| nbr-cosine | none |" in md and "| trees | train |" in md
    assert "| mlp | train+val |" in md
    runs = {m: [json.loads(p.read_text()) for p in _runs(out, m)] for m in ("iforest", "trees", "mlp")}
    assert all(len(r) == 2 for r in runs.values())
    # same split for the same seed, whatever the model
    for seed in (0, 1):
        sizes = {m: next(r["split"] for r in rs if r["seed"] == seed) for m, rs in runs.items()}
        assert sizes["iforest"]["source"] == sizes["trees"]["source"] == sizes["mlp"]["source"]
        assert sizes["iforest"]["test"] == sizes["mlp"]["test"]
    assert runs["iforest"][0]["labels_used"] == "none" and runs["trees"][0]["labels_used"] == "train"


def test_label_fraction_fits_every_supervised_method_on_the_same_labels(tiny, tmp_path, capsys, monkeypatch):
    """--label-fraction: the trees and every GNN fit on gcad_dist.train --label-fraction's subsample of the same
    seed (the same nodes), validation and test stay whole, label-free detectors and their keys are untouched."""
    import gcad_dist.detectors as detectors
    from gcad_dist.quality import QualityConfig, run_settings, settings_key, train_config

    def key(model: str, **kw) -> str:
        return settings_key(run_settings(QualityConfig(**kw), "tiny", tiny, model))

    assert key("trees", label_fraction=0.5) != key("trees") == key("trees", label_fraction=1.0)
    assert key("mlp", label_fraction=0.5) != key("mlp") and key("gccad", label_fraction=0.1) != key("gccad")
    assert key("iforest", label_fraction=0.5) == key("iforest")  # reads no label
    assert "label_fraction" not in run_settings(QualityConfig(), "tiny", tiny, "trees")  # earlier runs' keys hold
    assert train_config(QualityConfig(label_fraction=0.1), tiny, "gccad", 3).label_fraction == 0.1

    seen: dict[str, int] = {}
    fit = detectors.fit_score

    def spy(model, data, split, *a, **kw):
        if split is not None:
            seen[model] = int(split.train.sum())
        return fit(model, data, split, *a, **kw)

    monkeypatch.setattr(detectors, "fit_score", spy)
    out = tmp_path / "q"
    rc, md = _run(["--datasets", str(tiny), "--seeds", "1", "--models", "trees", "mlp", "iforest",
                   "--label-fraction", "0.5", "--epochs", "2", "--hidden", "8", "--threads", "1", "--out", str(out)],
                  capsys)
    assert rc == 0 and "fitted on the same 0.5 of the split's labelled training nodes" in md
    (trees,), (mlp,), (iforest,) = ([json.loads(p.read_text()) for p in _runs(out, m)] for m in ("trees", "mlp", "iforest"))
    tb, mb = trees["label_budget"], mlp["label_budget"]
    assert tb == mb  # the same subsample: counts of nodes and of anomalies, kept and whole
    assert 1 <= tb["train_labelled_anomalies"] < tb["train_total_anomalies"]
    assert tb["train_labelled"] < tb["train_total"] == trees["split"]["train"]
    assert seen["trees"] == tb["train_labelled"]  # what the trees were fitted on
    assert trees["split"] == mlp["split"]  # validation and test whole, the same for both
    assert "label_budget" not in iforest and "label_fraction" not in iforest["settings"]
    assert trees["settings"]["label_fraction"] == mlp["settings"]["label_fraction"] == 0.5
