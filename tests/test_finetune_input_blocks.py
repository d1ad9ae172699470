"""Fine-tuning's scratch candidate on gcad_dist.train's z-scores beside models that read the store's power transform:
one checkpoint whose members read their own input block (session 63)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from gcad_dist.checkpoint import INPUT_BLOCKS_KEY, load_model_file
from gcad_dist.cli import run_cli
from gcad_dist.finetune import main as finetune_main
from gcad_dist.model.candidate_ensemble import CandidateEnsemble, flat_ensemble, member_input
from gcad_dist.score import load_checkpoint_model, prepare_data, score_graph


class _ColumnSum(torch.nn.Module):
    """A stand-in member: its score is the sum of the columns it reads, and it records their count."""

    def __init__(self) -> None:
        super().__init__()
        self.seen = 0

    def forward(self, x, *args, **kwargs):
        self.seen = x.shape[1]
        return x.sum(1)

    def score(self, out):
        return out


def test_member_input_takes_its_block_and_the_label_columns() -> None:
    x = torch.arange(2 * 8, dtype=torch.float32).reshape(2, 8)  # blocks of 3 columns, then 2 label columns
    assert torch.equal(member_input(x, 0, 3, 2), x[:, [0, 1, 2, 6, 7]])
    assert torch.equal(member_input(x, 1, 3, 2), x[:, [3, 4, 5, 6, 7]])
    assert torch.equal(member_input(x, 1, 3, 0), x[:, 3:6])


def test_flat_ensemble_gives_each_part_s_members_their_part_s_block() -> None:
    inner = CandidateEnsemble([_ColumnSum(), _ColumnSum()], [0.0, 0.0], [1.0, 1.0])
    ens = flat_ensemble([(inner, 0.0, 1.0), (_ColumnSum(), 0.0, 1.0)], blocks=[0, 1], width=3, label_columns=2)
    assert ens.blocks == [0, 0, 1]
    x = torch.zeros(4, 8)
    x[:, 3:6] = 1.0  # only block 1 is non-zero: only the last member sees it
    outs = ens(x)
    assert [m.seen for m in ens.members] == [5, 5, 5]
    assert [float(o[0]) for o in outs] == [0.0, 0.0, 3.0]
    with pytest.raises(ValueError, match="one input block per part"):
        flat_ensemble([(inner, 0.0, 1.0)], blocks=[0, 1], width=3)
    with pytest.raises(ValueError, match="block width"):
        CandidateEnsemble([_ColumnSum()], [0.0], [1.0], blocks=[0], width=0)


@pytest.fixture(scope="module")
def graph(small_graph, tmp_path_factory: pytest.TempPathFactory):
    """conftest's small graph with its first two columns replaced by heavy-tailed counts (where the power transform
    and z-scores differ most)."""
    import copy

    from partitioning.io import save_npz

    g = copy.deepcopy(small_graph[0])
    g.x[:, :2] = np.random.default_rng(0).lognormal(0.0, 2.0, size=(g.x.shape[0], 2)).astype(g.x.dtype)
    path = tmp_path_factory.mktemp("graph") / "g.npz"
    save_npz(g, path)
    return g, path


@pytest.fixture(scope="module")
def power_checkpoint(make_local_checkpoint) -> Path:
    """A label-free recipe's checkpoint pre-trained on a power-transformed store (the build's default)."""
    return make_local_checkpoint("power")


def _run(main, argv: list[str], capsys) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as e:
        run_cli(main, argv)
    out, err = capsys.readouterr()
    return int(e.value.code or 0), out, err


COMMON = ["--epochs", "4", "--eval-every", "2", "--seed", "0", "--label-fraction", "0.5", "--no-progress",
          "--no-plots", "--threads", "1"]


def test_scratch_candidate_of_a_power_checkpoint_is_gcad_dist_train(graph, power_checkpoint, tmp_path,
                                                                     capsys) -> None:
    """From a power store's checkpoint, ``--model scratch`` fits what gcad_dist.train fits (its z-scores), and its
    checkpoint records that normalisation; ``--scratch-normalize checkpoint`` (before session 63) reads the power
    transform and fits something else."""
    from gcad_dist.train import main as train_main

    g, path = graph
    runs = {}
    for name, extra in (("scratch", []), ("old", ["--scratch-normalize", "checkpoint"])):
        code, _, err = _run(finetune_main, ["--checkpoint", str(power_checkpoint), "--graph", str(path), "--out",
                                           str(tmp_path / name), "--model", "scratch", *extra, *COMMON], capsys)
        assert code == 0, err
        runs[name] = json.loads((tmp_path / name / "metrics.json").read_text())
    code, _, err = _run(train_main, ["--graph", str(path), "--out", str(tmp_path / "train"), "--hidden", "16",
                                     *COMMON], capsys)
    assert code == 0, err
    tr = json.loads((tmp_path / "train" / "metrics.json").read_text())
    assert runs["scratch"]["val"] == tr["val"] and runs["scratch"]["test"] == tr["test"]
    assert runs["scratch"]["scratch_normalize"] == "standard" and runs["scratch"]["normalize"] == "standard"
    assert runs["old"]["scratch_normalize"] == "power" and runs["old"]["val"] != tr["val"]
    # the written model reads what it was trained on: scored from the raw graph, it gives the run's test figures
    from gcad_dist.data.splits import make_split
    from gcad_dist.metrics import evaluate

    assert load_model_file(tmp_path / "scratch" / "final")["extra"]["normalize"] == "standard"
    split = make_split(g.to_data(), seed=0)
    for name in ("scratch", "old"):
        s = score_graph(tmp_path / name / "final", path)
        assert evaluate(g.y, s, mask=split.test.numpy())["auprc"] == pytest.approx(runs[name]["test"]["auprc"],
                                                                                   abs=1e-5)


@pytest.mark.parametrize("label_inputs", [False, True])
def test_kept_with_power_members_the_checkpoint_reads_both_normalisations(graph, power_checkpoint, tmp_path, capsys,
                                                                         monkeypatch, label_inputs) -> None:
    """Every candidate kept: the scratch fit reads z-scores, the others the power transform; the written checkpoint
    names both blocks, gcad_dist.score builds them from the raw features, and it scores as the run did."""
    import gcad_dist.train as train_mod

    g, path = graph
    real = train_mod.keep_candidates

    def keep_all(fits, y, val_mask, seed=0, names=None, cross_fitted=False, **kw):
        kept, record = real(fits, y, val_mask, seed=seed, names=names, cross_fitted=cross_fitted)
        return (list(range(len(fits))), record) if names and "zero-shot" in names else (kept, record)

    monkeypatch.setattr(train_mod, "keep_candidates", keep_all)
    out = tmp_path / "ft"
    flag = "--label-inputs" if label_inputs else "--no-label-inputs"
    code, stdout, err = _run(finetune_main, ["--checkpoint", str(power_checkpoint), "--graph", str(path), "--out",
                                            str(out), "--candidate-scores", flag, "--exemplar", "off", *COMMON],
                             capsys)  # the four candidates of a power checkpoint (no exemplar block: session 78)
    assert code == 0, err
    m = json.loads((out / "metrics.json").read_text())
    assert m["environment"]["packages"]["torch"] == torch.__version__
    assert m["input_blocks"]["blocks"] == ["power", "standard"]
    assert m["input_blocks"]["kept"] == {"checkpoint": 0, "graph": 0, "scratch": 1, "zero-shot": 0}
    ck = load_model_file(out / "final")
    assert ck["extra"][INPUT_BLOCKS_KEY] == ["power", "standard"] and ck["extra"]["normalize"] == "power"
    assert {r.get("block") for r in ck["candidate_members"]} == {0, 1}
    loaded = load_checkpoint_model(out / "final")
    assert loaded.input_blocks == ["power", "standard"]
    data = prepare_data(str(path), loaded)
    width = g.x.shape[1]
    assert data.x.shape[1] == 2 * width + (2 if label_inputs else 0)
    from gcad_dist.train import normalize_features

    raw = torch.as_tensor(g.x).float()
    assert torch.allclose(data.x[:, :width], normalize_features(raw, "power"))
    assert torch.allclose(data.x[:, width:2 * width], normalize_features(raw, "standard"))
    # the written model scores the nodes as the run did (label inputs: only the training labels known)
    from gcad_dist.data.splits import make_split
    from gcad_dist.metrics import evaluate
    from gcad_dist.supervised import predict

    from gcad_dist.data.splits import subsample_split

    split = make_split(g.to_data(), seed=0)
    sub, _ = subsample_split(split, torch.as_tensor(g.y).long(), 0.5, seed=0)  # the kept training labels
    cs = np.load(out / "candidate_scores.npz")
    known = g.to_data()
    known.y = torch.where(sub.train, known.y, torch.full_like(known.y, -1))
    s = predict(loaded.model, prepare_data(known, loaded))
    assert evaluate(g.y, s, mask=split.val.numpy())["auprc"] == pytest.approx(m["val"]["auprc"], abs=1e-5)
    # the scratch member is the z-scored fit: its candidate scores are those of --model scratch
    code, _, err = _run(finetune_main, ["--checkpoint", str(power_checkpoint), "--graph", str(path), "--out",
                                       str(tmp_path / "alone"), "--model", "scratch", "--candidate-scores", flag,
                                       *COMMON], capsys)
    assert code == 0, err
    alone = np.load(tmp_path / "alone" / "candidate_scores.npz")
    np.testing.assert_allclose(cs["scores"][list(cs["names"]).index("scratch")], alone["scores"][0], atol=1e-6)
    # such a checkpoint is evaluated as it is (--epochs 0), not fine-tuned again, and reads its own normalisations
    code, _, err = _run(finetune_main, ["--checkpoint", str(out / "final"), "--graph", str(path), "--out",
                                       str(tmp_path / "again"), *COMMON], capsys)
    assert code == 2 and "Traceback" not in err
    assert ("--label-inputs" if label_inputs else "differently normalised features") in err
    if not label_inputs:
        code, _, err = _run(finetune_main, ["--checkpoint", str(out / "final"), "--graph", str(path), "--out",
                                           str(tmp_path / "zs"), "--epochs", "0", "--no-plots", "--threads", "1"],
                            capsys)
        assert code == 0, err
        assert np.array_equal(score_graph(tmp_path / "zs" / "final", path), score_graph(out / "final", path))
    from gcad_dist.score import main as score_main

    code, _, err = _run(score_main, ["--checkpoint", str(out / "final"), "--graph", str(path), "--out",
                                     str(tmp_path / "s.parquet"), "--normalize", "standard"], capsys)
    assert code == 2 and "--normalize must be auto" in err and "Traceback" not in err


def test_the_scratch_fit_kept_alone_reads_its_block_and_the_forest_the_checkpoint_s(graph, power_checkpoint, tmp_path,
                                                                                   capsys, monkeypatch) -> None:
    """``--model auto`` keeping the z-scored scratch fit alone still writes both blocks, so that the forest view reads
    the checkpoint's normalisation whichever candidates are kept; ``--model scratch`` is gcad_dist.train's fit as it
    is (its z-scores alone, its forest on them)."""
    import gcad_dist.forest_view as fv_mod
    import gcad_dist.train as train_mod

    g, path = graph
    real_keep, real_view = train_mod.keep_candidates, fv_mod.add_forest_view
    seen = []

    def scratch_only(fits, y, val_mask, seed=0, names=None, cross_fitted=False, **kw):
        kept, record = real_keep(fits, y, val_mask, seed=seed, names=names, cross_fitted=cross_fitted)
        if names and "zero-shot" in names:
            record.update(kept=["scratch"], chosen="scratch")
            return [names.index("scratch")], record
        return kept, record

    def spy(res, model, data, split, seed, threads=1, in_features=None, **kw):
        seen.append((data.x.shape[1], in_features))
        return real_view(res, model, data, split, seed, threads=threads, in_features=in_features, **kw)

    monkeypatch.setattr(train_mod, "keep_candidates", scratch_only)
    monkeypatch.setattr(fv_mod, "add_forest_view", spy)
    width = g.x.shape[1]
    for name, extra in (("auto", []), ("scratch", ["--model", "scratch"])):
        code, _, err = _run(finetune_main, ["--checkpoint", str(power_checkpoint), "--graph", str(path), "--out",
                                           str(tmp_path / name), "--no-label-inputs", *extra, *COMMON], capsys)
        assert code == 0, err
    assert seen == [(2 * width, width), (width, None)]
    m = json.loads((tmp_path / "auto" / "metrics.json").read_text())
    assert m["finetuned_model"] == "scratch" and m["input_blocks"]["kept"] == {"scratch": 1}
    assert load_checkpoint_model(tmp_path / "auto" / "final").input_blocks == ["power", "standard"]
    assert "input_blocks" not in json.loads((tmp_path / "scratch" / "metrics.json").read_text())
    # both score as their runs did: the same fit, its scores standardised in the blocked checkpoint
    from gcad_dist.data.splits import make_split
    from gcad_dist.metrics import evaluate

    split = make_split(g.to_data(), seed=0)
    for name in ("auto", "scratch"):
        mm = json.loads((tmp_path / name / "metrics.json").read_text())
        s = score_graph(tmp_path / name / "final", path)
        assert evaluate(g.y, s, mask=split.val.numpy())["auprc"] == pytest.approx(mm["val"]["auprc"], abs=1e-5)
    assert m["val"]["auroc"] == pytest.approx(
        json.loads((tmp_path / "scratch" / "metrics.json").read_text())["val"]["auroc"], abs=1e-6)
