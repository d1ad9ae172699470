"""Planted cliques, the structural corruption drawn at every pre-training step (``gcad_dist.pretrain --plant-cliques``):
what it adds and what it keeps, its place in a hop-ordered minibatch, and what it teaches the local contrast."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest
import torch

from gcad_dist.data.online_corruption import plant_cliques
from gcad_dist.model import GCCAD, GCCADConfig


def _groups(new: torch.Tensor) -> list[set[int]]:
    """The node sets joined by the new edges (connected components of ``new``)."""
    adj: dict[int, set[int]] = {}
    for a, b in new.t().tolist():
        adj.setdefault(a, set()).add(b)
    seen: set[int] = set()
    groups = []
    for start in adj:
        if start in seen:
            continue
        comp, todo = set(), [start]
        while todo:
            v = todo.pop()
            if v not in comp:
                comp.add(v)
                todo.extend(adj[v] - comp)
        seen |= comp
        groups.append(comp)
    return groups


@pytest.mark.parametrize("hop1", [None, 5])
def test_plant_cliques_joins_groups_of_chosen_normal_nodes(hop1):
    g = torch.Generator().manual_seed(0)
    n = 200
    ei = torch.randint(0, n, (2, 30), generator=g)
    y = torch.zeros(n, dtype=torch.long)
    y[:10] = 1  # already abnormal: never chosen
    y[10:20] = -1  # unlabelled: never chosen
    mask = torch.ones(n, dtype=torch.bool)
    mask[190:] = False  # not a seed: never chosen
    ei0, y0 = ei.clone(), y.clone()
    e2, y2, h1 = plant_cliques(ei, y, mask, 0.25, size=(4, 9), hop1_edges=hop1, generator=g)
    assert torch.equal(ei, ei0) and torch.equal(y, y0)  # inputs untouched
    cut = ei.size(1) if hop1 is None else hop1
    added = e2.size(1) - ei.size(1)
    assert h1 == cut + added
    assert torch.equal(e2[:, :cut], ei[:, :cut]) and torch.equal(e2[:, h1:], ei[:, cut:])  # the rest kept, in order
    new = e2[:, cut:h1]
    chosen = (y2 != y).nonzero().squeeze(1)
    cand = 170  # normal, labelled, in the mask
    assert chosen.numel() in (round(0.25 * cand), round(0.25 * cand) - 1)  # a single node left over is dropped
    assert (y[chosen] == 0).all() and mask[chosen].all() and (y2[chosen] == 1).all()
    assert set(new.flatten().tolist()) == set(chosen.tolist())
    groups = _groups(new)
    assert sum(len(c) for c in groups) == chosen.numel()
    pairs = {tuple(p) for p in new.t().tolist()}
    assert len(pairs) == added  # no duplicate, no self-loop
    for c in groups:  # each group a clique, both directions; every size in range but maybe the last (the rest)
        assert all((a, b) in pairs for a in c for b in c if a != b)
        assert 2 <= len(c) <= 9
    assert sum(len(c) < 4 for c in groups) <= 1
    same = plant_cliques(ei, y, mask, 0.0, hop1_edges=hop1)
    assert same[0] is ei and same[1] is y and same[2] == cut
    with pytest.raises(ValueError, match="clique size"):
        plant_cliques(ei, y, mask, 0.2, size=(1, 3))


def test_planted_cliques_stay_in_the_hop1_block_of_a_minibatch():
    """Cliques of a minibatch's seeds go into its hop-1 edges: the local contrast's seed-only path gives the same
    scores and loss as the untrimmed minibatch with the same edges."""
    from gcad_dist.data.neighbor_loader import SubgraphNeighborLoader
    from torch_geometric.data import Data

    torch.manual_seed(0)
    n, f = 300, 5
    data = Data(x=torch.randn(n, f, dtype=torch.float64), edge_index=torch.randint(0, n, (2, 1500)),
                y=torch.zeros(n, dtype=torch.long))
    b = next(iter(SubgraphNeighborLoader(data, [4], batch_size=60, shuffle=True, seed=1, prefetch=0,
                                         backend="builtin")))
    s = b.batch_size
    seeds = torch.zeros(b.num_nodes, dtype=torch.bool)
    seeds[:s] = True
    ei, y, h1 = plant_cliques(b.edge_index, b.y, seeds, 0.3, size=(3, 6), hop1_edges=b.num_sampled_edges[0],
                              generator=torch.Generator().manual_seed(2))
    assert int(y.sum()) >= 16 and (y[s:] == 0).all()
    model = GCCAD(GCCADConfig(in_dim=f, hidden=8, contrast="local", loss="logistic", tau=0.2)).to(torch.float64)
    full = model(b.x, ei, context_mask=seeds)
    trim = model(b.x, ei, context_mask=seeds, num_sampled_nodes=b.num_sampled_nodes, num_sampled_edges=[h1])
    torch.testing.assert_close(model.score(trim), model.score(full)[:s])
    torch.testing.assert_close(model.loss(trim, y, mask=seeds)["total"], model.loss(full, y, mask=seeds)["total"])


def _communities(n: int, k: int, f: int, g: torch.Generator, deg: int = 6, mixing: float = 0.0,
                 noise: float = 0.7) -> tuple[torch.Tensor, torch.Tensor]:
    """k feature communities (centres N(0, 1), members ``noise`` around them), ``n * deg / 2`` edges, a share
    ``mixing`` of them to any node, the rest inside the community; both directions."""
    comm = torch.arange(n) % k
    x = torch.randn(k, f, generator=g)[comm] + noise * torch.randn(n, f, generator=g)
    m = n * deg // 2
    src = torch.randint(0, n, (m,), generator=g)
    same = (torch.randint(0, n // k, (m,), generator=g) * k + comm[src]) % n
    dst = torch.where(torch.rand(m, generator=g) < mixing, torch.randint(0, n, (m,), generator=g), same)
    keep = src != dst
    ei = torch.stack([src[keep], dst[keep]])
    return x, torch.cat([ei, ei.flip(0)], 1)


def _clique_auroc(pretext: str) -> float:
    """AUROC, on the members of cliques planted once in a noisy community graph (45 of 800 nodes, cliques of 15),
    of the local contrast trained label-free for 80 steps on ``pretext`` redrawn at every step."""
    g = torch.Generator().manual_seed(0)
    n, f = 800, 16
    x, ei = _communities(n, 20, f, g, deg=12, mixing=0.3, noise=1.0)
    y = torch.zeros(n, dtype=torch.long)
    y[torch.randperm(n, generator=g)[:45]] = 1
    planted, _, _ = plant_cliques(ei, torch.zeros(n, dtype=torch.long), y.bool(), 1.0, size=(15, 15), generator=g)
    unlabelled = torch.zeros(n, dtype=torch.long)

    def draw() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        if pretext == "cliques":
            e2, y2, _ = plant_cliques(planted, unlabelled, None, 0.1, size=(4, 20))
            return x, e2, y2
        return _swapped(x, planted, unlabelled)

    return _pretext_auroc(x, planted, y, draw)


def _swapped(x: torch.Tensor, ei: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(x', ei, y'): a draw of feature swaps (15%), links unchanged."""
    from gcad_dist.data.online_corruption import swap_features

    x2, y2 = swap_features(x, y, None, 0.15)
    return x2, ei, y2


def _pretext_auroc(x: torch.Tensor, ei: torch.Tensor, y: torch.Tensor, draw, steps: int = 80) -> float:
    """AUROC on ``y`` of the local contrast trained label-free for ``steps`` steps on ``draw()`` = (x', edges',
    labels') redrawn at every step, scored on (x, ei)."""
    from gcad_dist.metrics import auroc

    torch.manual_seed(0)
    model = GCCAD(GCCADConfig(in_dim=x.size(1), hidden=32, contrast="local", loss="logistic", tau=0.2))
    opt = torch.optim.Adam(model.parameters(), lr=5e-3)
    for _ in range(steps):
        x2, e2, y2 = draw()
        loss = model.loss(model(x2, e2), y2)["total"]
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    with torch.no_grad():
        return auroc(y.numpy(), model.score(model(x, ei)).numpy())


def test_local_contrast_learns_planted_cliques_that_swaps_do_not_teach():
    """Trained on cliques redrawn at every step (no label), the local contrast finds the members of cliques planted
    once in the same graph (never shown as such); trained on feature swaps alone, it hardly does: a neighbourhood
    mixed with nodes from anywhere is not what a swapped node looks like."""
    cliques, swaps = _clique_auroc("cliques"), _clique_auroc("swaps")
    assert cliques > 0.75
    assert cliques > swaps + 0.1


def test_pretrain_options_for_cliques_are_validated():
    from gcad_dist.cli import UsageError
    from gcad_dist.pretrain import RECIPES, PretrainConfig, apply_recipe, parse_config, validate

    cfg = parse_config(["--store", "s.zarr", "--plant-cliques", "0.05", "--clique-size", "3", "8"])
    assert cfg.plant_cliques == 0.05 and cfg.clique_size == (3, 8)
    assert apply_recipe(PretrainConfig(store="s"), store_corrupted=False).plant_cliques == RECIPES["local"]["plant_cliques"]
    for argv, needle in ((["--plant-cliques", "1.2"], "--plant-cliques"), (["--clique-size", "1", "5"], "--clique-size"),
                         (["--clique-size", "6", "5"], "--clique-size")):
        with pytest.raises(UsageError, match=needle):
            validate(parse_config(["--store", "s.zarr", *argv]))


def _whole_graph_store(tmp_path: Path) -> Path:
    """A whole-graph store (``--k 1 --corruption-mix none``) of a 400-node, 4-community graph."""
    from partitioning.build import BuildConfig, build
    from partitioning.graph import Graph, csr_from_edges

    g = torch.Generator().manual_seed(0)
    x, ei = _communities(400, 4, 6, g)
    indptr, indices = csr_from_edges(ei[0].numpy(), ei[1].numpy(), 400)
    store = tmp_path / "w.zarr"
    build(BuildConfig(graph="test", out=str(store), k=1, corruption_mix="none", plot=False, progress=False),
          graph=Graph(x=x.numpy().astype(np.float32), indptr=indptr, indices=indices, source="test"))
    return store


def _train_and_check_draws(tmp_path: Path, store: Path, draws: list[tuple[torch.Tensor, torch.Tensor]],
                           **settings) -> None:
    """One short epoch of the loop Ray Train runs (``run_worker``) on ``store`` with ``settings``; the per-step
    corruption ``draws`` (changed rows, mask) a spy recorded must be of seeds only, at least 4, redrawn."""
    from gcad_dist.distributed.train_loop import run_worker
    from gcad_dist.pretrain import PretrainConfig, apply_recipe
    from tests.test_pretrain_loop import LocalReporter

    cfg = PretrainConfig(store=str(store), epochs=1, min_steps_per_epoch=4, batch_size=100, sample_threshold=100,
                         hidden=16, prefetch=0, **settings)
    apply_recipe(cfg, store_corrupted=False)
    rep = LocalReporter(tmp_path / "ck")
    torch.set_num_threads(1)
    run_worker({"pretrain": asdict(cfg)}, rep)
    assert len(draws) >= 4 and all(d.numel() >= 8 for d, _ in draws)
    assert all(m is not None and m[d].all() for d, m in draws)  # seeds only
    assert len({tuple(d.tolist()) for d, _ in draws}) > 1  # redrawn, not fixed
    assert np.isfinite(rep.state()["history"][0]["loss"])


@pytest.mark.parametrize("contrast", ["local", "graph"])
def test_pretraining_loop_plants_cliques_each_step(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   contrast: str) -> None:
    """``--plant-cliques`` in the loop Ray Train runs: a fresh draw each step on a whole-graph store trained by
    neighbour-sampled minibatches. Local: shared by the ensemble's members (their swaps pick among the other nodes).
    Graph (the paper's contrast, cliques as its only corruption): through the hop-trimmed GCCAD layers."""
    import gcad_dist.distributed.train_loop as loop

    store = _whole_graph_store(tmp_path)
    draws: list[tuple[torch.Tensor, torch.Tensor]] = []
    real = loop.plant_cliques

    def spy(edge_index, y, mask, fraction, size, hop1_edges=None, generator=None):
        out = real(edge_index, y, mask, fraction, size, hop1_edges, generator)
        draws.append(((out[1] != y).nonzero().squeeze(1), mask))
        return out

    monkeypatch.setattr(loop, "plant_cliques", spy)
    settings = (dict(contrast="local", loss="logistic", tau=0.2, swap_features=0.1, ensemble=2) if contrast == "local"
                else dict(recipe="paper", swap_features=0.0))
    _train_and_check_draws(tmp_path, store, draws, plant_cliques=0.1, **settings)


def test_harness_option_for_cliques_keeps_earlier_run_keys():
    """``gcad_dist.quality --pre-cliques``: left out of gccad-pre's run key at 0 (the runs cached before the option
    keep their key), part of it otherwise; a bad value is a usage error."""
    from gcad_dist.cli import UsageError
    from gcad_dist.detectors import settings_of
    from gcad_dist.quality import _validate, build_parser, QualityConfig

    base = settings_of("gccad-pre", {"pre_epochs": None, "pre_ensemble": None})
    assert "pre_cliques" not in base
    assert settings_of("gccad-pre", {"pre_cliques": 0.0}) == base
    assert settings_of("gccad-pre", {"pre_cliques": 0.05}) == {**base, "pre_cliques": 0.05}
    args = vars(build_parser().parse_args(["--pre-cliques", "0.05"]))
    assert args["pre_cliques"] == 0.05
    with pytest.raises(UsageError, match="--pre-cliques"):
        _validate(QualityConfig(pre_cliques=0.2))


def test_harness_cliques_take_their_share_out_of_the_swaps(monkeypatch: pytest.MonkeyPatch):
    """gccad-pre with ``pre_cliques``: pretrain gets --plant-cliques and the swaps cut by as much (0.15 in all)."""
    from gcad_dist.detectors import gccad_pre

    seen: list[dict] = []
    monkeypatch.setattr(gccad_pre, "_pipeline", lambda *a: seen.append(a[6]) or np.zeros(1))
    for cliques in (None, 0.05):
        gccad_pre.fit_score(None, None, 0, pre_cliques=cliques)
    assert (seen[0]["plant_cliques"], seen[0]["swap_features"]) == (0.0, 0.15)
    assert (seen[1]["plant_cliques"], seen[1]["swap_features"]) == (0.05, 0.1)
    with pytest.raises(ValueError, match="pre_cliques"):
        gccad_pre.fit_score(None, None, 0, pre_cliques=0.2)


# -- feature tails (global outliers) ----------------------------------------------------------------------------


def test_push_to_tails_moves_a_few_features_of_chosen_normal_nodes_to_their_column_tails():
    """What a tails corruption changes (a tenth of the columns of chosen normal seeds, to values of the column's far
    tail, the rare value of a sparse column; their labels) and what it keeps (links are not its business, every
    other row and column, anomalies, unlabelled and unmasked nodes, its inputs)."""
    from gcad_dist.data.online_corruption import push_to_tails

    g = torch.Generator().manual_seed(0)
    n, f = 2000, 30
    x = torch.randn(n, f, generator=g)
    x[:, 0] = (torch.rand(n, generator=g) < 0.02).float()  # a sparse column: its rare value is 1
    y = torch.zeros(n, dtype=torch.long)
    y[:50], y[50:80] = 1, -1
    mask = torch.ones(n, dtype=torch.bool)
    mask[1500:] = False
    x0, y0 = x.clone(), y.clone()
    x2, y2 = push_to_tails(x, y, mask, 0.1, generator=g)
    assert torch.equal(x, x0) and torch.equal(y, y0)
    changed = (x2 != x).any(1)
    picked = (y2 != y).nonzero().squeeze(1)
    assert picked.numel() == round(0.1 * 1420)
    assert set(changed.nonzero().squeeze(1).tolist()) <= set(picked.tolist())
    assert (y[picked] == 0).all() and mask[picked].all() and (y2[picked] == 1).all()
    cols = (x2 != x)[picked].sum(1)
    assert cols.max() <= 3 and cols.float().mean() > 2  # ceil(0.1 * 30) = 3 columns (a tail value may equal the own)
    ordered = x.sort(0).values
    t = 20  # 1% of 2000 rows
    r, c = (x2 != x).nonzero().unbind(1)
    in_tail = (x2[r, c].unsqueeze(1) == ordered[:t, c].T).any(1) | (x2[r, c].unsqueeze(1) == ordered[-t:, c].T).any(1)
    assert in_tail.all()
    far = (x2[r, c] - x[r, c]).abs()
    assert far.median() > 2  # a N(0, 1) column's 1% tail is beyond 2.3
    hit0 = (x2[:, 0] != x[:, 0])
    assert hit0.any() and (x2[hit0, 0] == 1).all()  # a sparse column: a 0 becomes the rare 1, never the reverse
    with pytest.raises(ValueError, match="columns"):
        push_to_tails(x, y, None, 0.1, columns=0)


def _outlier_auroc(pretext: str) -> float:
    """AUROC, on 40 of 800 nodes of a community graph given extreme values once (a fifth of their columns, the
    0.5% tails: not the pretext's own settings), of the local contrast trained label-free for 80 steps on
    ``pretext`` redrawn at every step."""
    from gcad_dist.data.online_corruption import push_to_tails

    g = torch.Generator().manual_seed(0)
    n, f = 800, 20
    x, ei = _communities(n, 20, f, g, deg=12, mixing=0.3, noise=1.0)
    x = x * torch.rand(f, generator=g).mul(2).add(0.2)  # columns of unequal spread
    target = torch.zeros(n, dtype=torch.bool)
    target[torch.randperm(n, generator=g)[:40]] = True
    planted, y = push_to_tails(x, torch.zeros(n, dtype=torch.long), target, 1.0, columns=0.2, tail=0.005, generator=g)
    unlabelled = torch.zeros(n, dtype=torch.long)

    def draw() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        if pretext == "tails":
            x2, y2 = push_to_tails(planted, unlabelled, None, 0.15)
            return x2, ei, y2
        return _swapped(planted, ei, unlabelled)

    return _pretext_auroc(planted, ei, y, draw)


def test_local_contrast_learns_global_outliers_from_tails():
    """Trained on tails redrawn at every step (no label), the local contrast finds nodes given extreme values once
    with other settings (never shown as such), better than when trained on feature swaps alone."""
    tails, swaps = _outlier_auroc("tails"), _outlier_auroc("swaps")
    assert tails > 0.8
    assert tails > swaps + 0.02


def test_pretrain_option_for_tails_is_validated():
    from gcad_dist.cli import UsageError
    from gcad_dist.pretrain import RECIPES, PretrainConfig, apply_recipe, parse_config, validate

    assert parse_config(["--store", "s.zarr", "--push-tails", "0.05"]).push_tails == 0.05
    assert apply_recipe(PretrainConfig(store="s"), store_corrupted=False).push_tails == RECIPES["local"]["push_tails"]
    assert apply_recipe(PretrainConfig(store="s"), store_corrupted=True).push_tails == 0.0
    with pytest.raises(UsageError, match="--push-tails"):
        validate(parse_config(["--store", "s.zarr", "--push-tails", "1.5"]))


def test_pretraining_loop_pushes_tails_each_step(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``--push-tails`` in the loop Ray Train runs: a fresh draw of seeds each step, shared by the ensemble's
    members, whose swaps pick among the other seeds."""
    import gcad_dist.distributed.train_loop as loop

    store = _whole_graph_store(tmp_path)
    draws: list[tuple[torch.Tensor, torch.Tensor]] = []
    swapped: list[torch.Tensor] = []
    real_tails, real_swaps = loop.push_to_tails, loop.draw_member_swaps

    def spy(x, y, mask, fraction, *a, **k):
        out = real_tails(x, y, mask, fraction, *a, **k)
        draws.append(((out[1] != y).nonzero().squeeze(1), mask))
        return out

    def spy_swaps(y, mask, fraction, members, *a, **k):
        plan = real_swaps(y, mask, fraction, members, *a, **k)
        swapped.append((y[plan[1]] != 0).sum())  # a swap never picks a node already corrupted
        return plan

    monkeypatch.setattr(loop, "push_to_tails", spy)
    monkeypatch.setattr(loop, "draw_member_swaps", spy_swaps)
    _train_and_check_draws(tmp_path, store, draws, push_tails=0.1, contrast="local", loss="logistic", tau=0.2,
                           swap_features=0.05, ensemble=2)
    assert swapped and all(int(s) == 0 for s in swapped)


def test_harness_option_for_tails_keeps_earlier_run_keys_and_shares_the_corrupted_nodes(
        monkeypatch: pytest.MonkeyPatch):
    """``gcad_dist.quality --pre-tails``: out of gccad-pre's run key at 0, in it otherwise; the tails (and
    cliques) take their share out of the swaps (0.15 in all); too large a share is a usage error."""
    from gcad_dist.cli import UsageError
    from gcad_dist.detectors import gccad_pre, settings_of
    from gcad_dist.quality import QualityConfig, _validate, build_parser

    base = settings_of("gccad-pre", {"pre_epochs": None, "pre_ensemble": None})
    assert "pre_tails" not in base
    assert settings_of("gccad-pre", {"pre_tails": 0.0}) == base
    assert settings_of("gccad-pre", {"pre_tails": 0.05}) == {**base, "pre_tails": 0.05}
    assert vars(build_parser().parse_args(["--pre-tails", "0.05"]))["pre_tails"] == 0.05
    with pytest.raises(UsageError, match="--pre-tails"):
        _validate(QualityConfig(pre_tails=0.2))
    with pytest.raises(UsageError, match="together"):
        _validate(QualityConfig(pre_tails=0.1, pre_cliques=0.1))
    seen: list[dict] = []
    monkeypatch.setattr(gccad_pre, "_pipeline", lambda *a: seen.append(a[6]) or np.zeros(1))
    gccad_pre.fit_score(None, None, 0, pre_tails=0.05)
    gccad_pre.fit_score(None, None, 0, pre_tails=0.05, pre_cliques=0.05)
    assert (seen[0]["push_tails"], seen[0]["plant_cliques"], seen[0]["swap_features"]) == (0.05, 0.0, 0.1)
    assert (seen[1]["push_tails"], seen[1]["plant_cliques"], seen[1]["swap_features"]) == (0.05, 0.05, 0.05)
    with pytest.raises(ValueError, match="pre_tails"):
        gccad_pre.fit_score(None, None, 0, pre_tails=0.1, pre_cliques=0.1)
