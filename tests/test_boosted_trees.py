"""Gradient-boosted trees held as tensors (gcad_dist.model.boosted_trees) and the forest view's trees, a random
forest and boosted trees blended by rank (gcad_dist.model.tree_blend)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch_geometric.data import Data

from gcad_dist.model.boosted_trees import BoostedTreesScorer, fit_boosted_trees, fit_sklearn_boosted_trees
from gcad_dist.model.forest import ForestScorer, graph_features
from gcad_dist.model.tree_blend import TreeBlend, fit_tree_blend, trees_from_state


def _graph(n: int = 600, f: int = 6, seed: int = 0, shift: float = 1.5) -> Data:
    """Random links; anomalies (10%) told by their first two columns (weakly: the trees must not be perfect)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, f, generator=g)
    y = torch.zeros(n, dtype=torch.long)
    y[torch.randperm(n, generator=g)[: n // 10]] = 1
    x[y == 1, :2] += shift
    src = torch.randint(0, n, (4 * n,), generator=g)
    dst = torch.randint(0, n, (4 * n,), generator=g)
    ei = torch.cat([torch.stack([src, dst]), torch.stack([dst, src])], dim=1)
    return Data(x=x, edge_index=ei, y=y, num_nodes=n)


def test_the_boosted_trees_score_the_log_odds_scikit_learn_gives():
    """The tensors give ``decision_function`` of the same features, on the graph fitted and on another one; the state
    alone rebuilds them; a single class is refused."""
    data = _graph()
    train = torch.arange(data.num_nodes) % 2 == 0
    model = fit_sklearn_boosted_trees(data.x, data.edge_index, data.y, train, seed=4)
    scorer = BoostedTreesScorer.from_sklearn(model, data.x.shape[1])
    assert scorer.roots.numel() == model.n_iter_ > 1
    other = _graph(n=150, seed=5)
    for g in (data, other):
        got = scorer.score(scorer(g.x, g.edge_index)).numpy()
        want = model.decision_function(graph_features(g.x, g.edge_index).numpy().astype(np.float64))
        np.testing.assert_allclose(got, want, rtol=0, atol=2e-5)
    again = BoostedTreesScorer.from_state(scorer.state_dict())
    assert torch.equal(again(other.x, other.edge_index), scorer(other.x, other.edge_index))
    assert fit_boosted_trees(data.x, data.edge_index, data.y, train, seed=4).baseline == scorer.baseline
    with pytest.raises(ValueError, match="single class"):
        fit_boosted_trees(data.x, data.edge_index, torch.zeros_like(data.y), train, seed=0)
    with pytest.raises(ValueError, match="missing"):
        BoostedTreesScorer.from_state({"feature": scorer.feature})


def test_unlabelled_nodes_are_left_out_of_the_fit():
    """Nodes of unknown label (y = -1) in the training mask change nothing."""
    data = _graph()
    train = torch.arange(data.num_nodes) % 2 == 0
    y_masked = data.y.clone()
    y_masked[torch.arange(data.num_nodes) % 4 == 0] = -1
    a = fit_boosted_trees(data.x, data.edge_index, y_masked, train, seed=0)
    b = fit_boosted_trees(data.x, data.edge_index, y_masked, train & (y_masked >= 0), seed=0)
    assert torch.equal(a(data.x, data.edge_index), b(data.x, data.edge_index))


def test_one_training_anomaly_fits_where_early_stopping_would_need_two():
    """scikit-learn's early stopping (on by default from 10,000 training nodes, or asked for in ``params``) holds out a
    stratified tenth, which needs two nodes of each class: with one training anomaly the trees fit without it instead
    of failing; with more, ``params`` reach the classifier."""
    data = _graph(n=10_050, f=3)
    y = torch.zeros_like(data.y)
    y[7] = 1
    train = torch.ones(data.num_nodes, dtype=torch.bool)
    model = fit_sklearn_boosted_trees(data.x, data.edge_index, y, train, seed=0)
    assert not model.do_early_stopping_ and model.n_iter_ == 100
    small = _graph(n=300, f=3)
    y_small = torch.zeros_like(small.y)
    y_small[3] = 1
    train_small = torch.ones(small.num_nodes, dtype=torch.bool)
    asked = fit_sklearn_boosted_trees(small.x, small.edge_index, y_small, train_small, seed=0,
                                      params={"early_stopping": True, "max_iter": 7})
    assert not asked.do_early_stopping_ and asked.n_iter_ == 7
    more = fit_sklearn_boosted_trees(small.x, small.edge_index, small.y, train_small, seed=0,
                                     params={"early_stopping": True, "max_iter": 300, "n_iter_no_change": 2})
    assert more.do_early_stopping_ and more.n_iter_ < 300


def test_the_blend_is_the_mean_of_both_members_ranks_and_round_trips():
    data = _graph()
    train = torch.arange(data.num_nodes) % 2 == 0
    blend = fit_tree_blend(data.x, data.edge_index, data.y, train, seed=1)
    got = blend.score(blend(data.x, data.edge_index)).double()
    forest, boosted = blend.member_scores(data.x, data.edge_index)
    # on the graph it was fitted on, each member's CDF is its mid-rank / N
    from scipy.stats import rankdata

    n = data.num_nodes
    want = ((rankdata(forest.numpy()) - 0.5) / n + (rankdata(boosted.numpy()) - 0.5) / n) / 2
    np.testing.assert_allclose(got.numpy(), want, rtol=0, atol=1e-6)
    # the members are the forest view's RF-Graph and the boosted trees, each as fitted alone
    from gcad_dist.model.forest import fit_forest

    alone = fit_forest(data.x, data.edge_index, data.y, train, seed=1)
    assert torch.equal(alone(data.x, data.edge_index), blend.forest(data.x, data.edge_index))
    # the state alone rebuilds it; a forest's state alone (checkpoints before session 66) rebuilds a forest
    other = _graph(n=150, seed=7)
    again = trees_from_state(blend.state_dict())
    assert isinstance(again, TreeBlend)
    assert torch.equal(again(other.x, other.edge_index), blend(other.x, other.edge_index))
    assert isinstance(trees_from_state(alone.state_dict()), ForestScorer)
    # fitted on the leading columns only (label inputs after them), it reads those alone
    wide = torch.cat([data.x, torch.rand(n, 2)], dim=1)
    lead = fit_tree_blend(wide, data.edge_index, data.y, train, seed=1, in_features=6)
    assert torch.equal(lead(wide, data.edge_index), blend(data.x, data.edge_index))


@pytest.mark.parametrize("local", [False, True])
def test_the_fits_own_scores_are_its_forward_on_the_graph_it_was_fitted_on(local):
    """fit_scored_tree_blend returns the blend's scores from the fit's one pass over the graph features (the forest
    view scores its graph without a second pass): the forward's, to the bit, and the same blend as fit_tree_blend."""
    from gcad_dist.model.tree_blend import fit_scored_tree_blend

    data = _graph()
    train = torch.arange(data.num_nodes) % 2 == 0
    blend, scores = fit_scored_tree_blend(data.x, data.edge_index, data.y, train, seed=1, local=local)
    assert scores.dtype == torch.float32 and scores.shape == (data.num_nodes,)
    assert torch.equal(scores, blend(data.x, data.edge_index))
    assert torch.equal(fit_tree_blend(data.x, data.edge_index, data.y, train, seed=1, local=local)(
        data.x, data.edge_index), scores)


def test_the_blends_forest_reads_two_hops_and_its_boosted_trees_one():
    """Since session 85 the forest reads the one-hop columns and the second hop's means after them, the boosted trees
    the one-hop columns alone (their scores are those of trees fitted on ``graph_features`` of one hop); a blend state
    written before (a forest without ``hops``) still scores on one hop."""
    from gcad_dist.model.forest import FOREST_HOPS, fit_forest

    data = _graph()
    train = torch.arange(data.num_nodes) % 2 == 0
    blend = fit_tree_blend(data.x, data.edge_index, data.y, train, seed=1)
    assert blend.forest.hops == FOREST_HOPS == 2
    forest, boosted = blend.member_scores(data.x, data.edge_index)
    one_hop = graph_features(data.x, data.edge_index)
    alone = fit_boosted_trees(data.x, data.edge_index, data.y, train, seed=1)
    torch.testing.assert_close(boosted, alone.log_odds(one_hop), rtol=0, atol=1e-9)
    forest_alone = fit_forest(data.x, data.edge_index, data.y, train, seed=1)
    assert torch.equal(forest.float(), forest_alone(data.x, data.edge_index))
    # an older blend: both members at one hop, its forest's state without "hops"
    old_forest = fit_forest(data.x, data.edge_index, data.y, train, seed=1, hops=1)
    from gcad_dist.model.tree_blend import blend_trees

    old = blend_trees(old_forest, alone, one_hop)
    state = old.state_dict()
    del state["forest._extra_state"]["hops"]
    again = trees_from_state(state)
    assert again.forest.hops == 1
    assert torch.equal(again(data.x, data.edge_index), old(data.x, data.edge_index))


def test_the_blend_ranks_planted_anomalies_above_chance_and_at_least_as_well_as_a_weaker_member():
    """On held-out nodes of a graph whose anomalies show in two columns, the blend scores well above chance, and at
    least as well as the weaker of its two members (a rank mean cannot fall below both)."""
    from gcad_dist.metrics import auroc

    data = _graph(n=2000, seed=3)
    train = torch.arange(data.num_nodes) % 2 == 0
    test = ~train
    blend = fit_tree_blend(data.x, data.edge_index, data.y, train, seed=0)
    y = data.y.numpy()[test.numpy()]
    s = blend(data.x, data.edge_index).numpy()[test.numpy()]
    f, b = (m.numpy()[test.numpy()] for m in blend.member_scores(data.x, data.edge_index))
    assert auroc(y, s) > 0.75
    assert auroc(y, s) >= min(auroc(y, f), auroc(y, b)) - 1e-9
