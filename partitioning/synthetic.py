"""Large synthetic graphs with communities, power-law degrees and planted anomalies.

Model (all vectorised NumPy, one ``np.random.default_rng(seed)`` stream, so a seed fixes the graph):

- **Communities.** ``communities`` (auto: ``max(4, round(nodes ** 0.25))``, e.g. 10 for 10k nodes and
  32 for 1M) with log-normal sizes (sigma 0.5); each node belongs to one.
- **Degrees.** Chung-Lu / degree-corrected SBM: every node gets a weight ``w ~ Pareto`` with density
  exponent ``power_law_exponent`` (default 2.5), capped at the structural cut-off so that no expected
  degree exceeds ``sqrt(nodes * avg_degree)``. Edges are sampled with both endpoints proportional to
  ``w``: the first endpoint by Poisson edge counts per node, the second within the first one's
  community with probability ``1 - mixing`` (default 0.9) or anywhere otherwise. Self-loops and
  duplicates are dropped and a top-up round makes the number of undirected edges
  ``round(nodes * avg_degree / 2)`` (mean degree = ``avg_degree``), structural-anomaly cliques included.
- **Features.** Community ``c`` has a centroid ``mu_c ~ N(0, s^2 I)`` with
  ``s = separation * noise / sqrt(2 * features)``, so two centroids lie ``separation`` noise-units apart
  on average (default 6: K-means recovers the communities well, yet the clusters overlap a little);
  node features are ``mu_c + noise * N(0, I)`` (float32).
  With ``feature_kind="words"`` the features are instead a binary bag of words, as in citation graphs (Cora,
  the base of inj_cora): community ``c`` has a word distribution ``q_c = 0.7 topic_c + 0.3 background`` over the
  ``features`` words (``topic_c ~ Dirichlet(0.1)``, ``background ~ Dirichlet(1)``), a node draws
  ``max(1, Poisson(words))`` words from its community's ``q_c``, and ``x`` is 1 for each word drawn at least once.
- **Anomalies** (``anomaly_fraction`` of the nodes, default 3%; ``y = 1``), in up to four kinds whose shares
  are ``anomaly_mix`` (default 50% / 25% / 25% / 0%), saved as ``anomaly_type`` (int8):
  1. *community swap* (the GCCAD kind): features re-drawn around the centroid of another community (words: from
     another community's distribution, as many draws) while the links still tie the node into its own
     community: locally inconsistent with its context;
  2. *contextual* (PyGOD / BOND ``gen_contextual_outlier``): features replaced by those of the farthest
     (Euclidean) of ``contextual_candidates`` (default 50) random nodes;
  3. *structural* (PyGOD / BOND ``gen_structural_outlier``): groups of ``clique_size`` (default 15)
     random nodes connected into cliques;
  4. *camouflage* (off by default; the fraud pattern of CARE-GNN, Dou et al. 2020): the node keeps its
     community, its links to normal nodes and most of its features, but a few columns (``features // 8``,
     at least one, the same for every such node: a shared behaviour signature) are shifted by
     ``camouflage_shift`` noise units (default 2.5), each column in a fixed direction (words: the signature
     words are present). Only a detector that learns the signature, or that compares the node with its own
     community, sees it.

CLI::

    python -m partitioning.synthetic --nodes 1000000 --avg-degree 20 --out runs/big.npz

writes the ``.npz`` format of :mod:`partitioning.io` plus the extra keys ``anomaly_type`` (int8 [N]:
0 none, 1 community swap, 2 contextual, 3 structural, 4 camouflage, 5 ring) and ``community`` (int32 [N]).
"""

from __future__ import annotations

import argparse
import logging
import math
import resource
import sys
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import numpy as np

from partitioning.errors import GraphInputError
from partitioning.graph import Graph, csr_from_edges, sorted_unique
from partitioning.validate import check_int_range, check_positive, check_ratio

log = logging.getLogger("partitioning.synthetic")  # same name when run with -m

__all__ = [
    "ANOMALY_TYPES",
    "CLIQUE_FEATURES",
    "FEATURE_KINDS",
    "SyntheticConfig",
    "SyntheticGraph",
    "camouflage_columns",
    "generate",
    "main",
    "synthesize",
]

#: ``anomaly_type`` codes.
ANOMALY_TYPES = {0: "none", 1: "community_swap", 2: "contextual", 3: "structural", 4: "camouflage", 5: "ring"}
#: ``--feature-kind``: Gaussian features around community centroids, or a binary bag of words per community topic
FEATURE_KINDS = ("gaussian", "words")
#: ``--clique-features``: clique members keep their own features, or share a ring profile (fraud rings)
CLIQUE_FEATURES = ("own", "shared")


@dataclass
class SyntheticConfig:
    """Settings of the synthetic generator (see the module docstring for the model)."""

    nodes: int = 10_000
    avg_degree: float = 20.0
    communities: int | None = None  # None: max(4, round(nodes ** 0.25))
    features: int = 64
    anomaly_fraction: float = 0.03
    # swap, contextual, structural[, camouflage]: three shares mean no camouflage
    anomaly_mix: tuple[float, ...] = (0.5, 0.25, 0.25)
    mixing: float = 0.1  # share of edges whose second end is drawn from the whole graph
    power_law_exponent: float = 2.5
    separation: float = 6.0  # mean centroid distance in units of ``noise``
    noise: float = 1.0  # within-community feature standard deviation per dimension
    clique_size: int = 15
    clique_features: str = "own"  # CLIQUE_FEATURES; "shared": the cliques are fraud rings (anomaly_type 5)
    contextual_candidates: int = 50
    camouflage_shift: float = 2.5  # in units of ``noise``, per signature column
    feature_kind: str = "gaussian"  # FEATURE_KINDS
    words: float = 20.0  # feature_kind "words": mean word draws per node
    seed: int = 0

    def resolved_communities(self) -> int:
        if self.communities is not None:
            return int(self.communities)
        return max(4, round(self.nodes**0.25))

    def validate(self) -> SyntheticConfig:
        """Raise ``GraphInputError('--option', problem)`` on a bad setting; returns ``self``."""
        check_int_range("--nodes", self.nodes, low=2)
        check_positive("--avg-degree", self.avg_degree)
        if self.avg_degree > self.nodes - 1:
            raise GraphInputError(
                "--avg-degree", f"must be at most nodes - 1 = {self.nodes - 1}, got {self.avg_degree}"
            )
        if self.communities is not None:
            check_int_range("--communities", self.communities, low=1, high=self.nodes)
        check_int_range("--features", self.features, low=1)
        check_ratio("--anomaly-fraction", self.anomaly_fraction, low_inclusive=True)
        if self.anomaly_fraction > 0.5:
            raise GraphInputError("--anomaly-fraction", f"must be at most 0.5, got {self.anomaly_fraction}")
        mix = tuple(self.anomaly_mix)
        if len(mix) not in (3, 4) or any(not math.isfinite(float(m)) or m < 0 for m in mix) or sum(mix) <= 0:
            raise GraphInputError(
                "--anomaly-mix", f"must be three or four non-negative shares with a positive sum, got {mix}"
            )
        check_ratio("--mixing", self.mixing, low_inclusive=True, high_inclusive=True)
        if not (math.isfinite(self.power_law_exponent) and self.power_law_exponent > 2.0):
            raise GraphInputError("--power-law-exponent", f"must be > 2, got {self.power_law_exponent}")
        check_positive("--separation", self.separation, allow_zero=True)
        check_positive("--noise", self.noise)
        check_int_range("--clique-size", self.clique_size, low=2)
        if self.clique_features not in CLIQUE_FEATURES:
            raise GraphInputError("--clique-features",
                                  f"must be one of {', '.join(CLIQUE_FEATURES)}, got {self.clique_features!r}")
        check_int_range("--contextual-candidates", self.contextual_candidates, low=1)
        check_positive("--camouflage-shift", self.camouflage_shift)
        if self.feature_kind not in FEATURE_KINDS:
            raise GraphInputError("--feature-kind",
                                  f"must be one of {', '.join(FEATURE_KINDS)}, got {self.feature_kind!r}")
        check_positive("--words", self.words)
        check_int_range("--seed", self.seed, low=0)
        return self


@dataclass
class SyntheticGraph:
    """The generated graph plus the ground truth behind its labels."""

    graph: Graph
    anomaly_type: np.ndarray  # int8 [N], codes in ANOMALY_TYPES
    community: np.ndarray  # int32 [N]
    config: SyntheticConfig = field(repr=False, default_factory=SyntheticConfig)

    def extra_arrays(self) -> dict[str, np.ndarray]:
        return {"anomaly_type": self.anomaly_type, "community": self.community}


# ----------------------------------------------------------------------------------------------------
# Stages


def _assign_communities(rng: np.random.Generator, n: int, c: int) -> np.ndarray:
    share = rng.lognormal(0.0, 0.5, size=c)
    share /= share.sum()
    return rng.choice(c, size=n, p=share).astype(np.int32)


def _degree_weights(rng: np.random.Generator, n: int, avg_degree: float, gamma: float) -> np.ndarray:
    """Pareto weights (density exponent ``gamma``, minimum 1), capped at the structural cut-off."""
    w = rng.pareto(gamma - 1.0, size=n) + 1.0
    # expected degree_i = avg_degree * w_i / mean(w): cap it at sqrt(n * avg_degree)
    cap = math.sqrt(n * avg_degree) * w.mean() / avg_degree
    np.minimum(w, max(cap, 1.0), out=w)
    return w


def _pair(rng: np.random.Generator, src: np.ndarray, dst: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Pair two endpoint multisets at random; the surplus of the longer one (a random subset) is dropped."""
    if dst.size >= src.size:
        return src, dst[rng.permutation(dst.size)[: src.size]]
    return src[rng.permutation(src.size)[: dst.size]], dst


class _EdgeSampler:
    """Chung-Lu edges, both endpoints ∝ w: within the community with probability ``1 - mixing``.

    Each endpoint side is a multiset ``repeat(node, Poisson(w * budget / W))`` (no binary search); the
    two sides are paired by a random permutation per community (a loop over communities, not nodes).
    The second side is drawn a little larger (a few standard deviations) so that it rarely falls short.
    """

    def __init__(self, w: np.ndarray, community: np.ndarray, mixing: float) -> None:
        self.w, self.mixing = w, mixing
        self.total = float(w.sum())
        self.order = np.argsort(community, kind="stable")  # nodes grouped by community
        self.w_sorted = w[self.order]
        n_comm = int(community.max()) + 1
        sizes = np.bincount(community, minlength=n_comm)
        self.bounds = np.concatenate([[0], np.cumsum(sizes)])  # community c = order[bounds[c]:bounds[c+1]]
        self.comm_sorted = community[self.order]
        self.comm_share = np.bincount(community, weights=w, minlength=n_comm) / self.total

    @staticmethod
    def _margin(expected: np.ndarray) -> np.ndarray:
        return 1.0 + 0.01 + 6.0 / np.sqrt(np.maximum(expected, 1.0))

    def sample(self, rng: np.random.Generator, m: int) -> tuple[np.ndarray, np.ndarray]:
        """About ``m`` edges (Poisson-many), as (src, dst) int64 arrays, self-loops and repeats included."""
        m_in, m_out = m * (1.0 - self.mixing), m * self.mixing
        srcs: list[np.ndarray] = []
        dsts: list[np.ndarray] = []
        # within-community edges: both sides grouped by community, paired community by community
        lam = self.w_sorted * (m_in / self.total)
        src_cnt = rng.poisson(lam)
        dst_cnt = rng.poisson(lam * self._margin(self.comm_share * m_in)[self.comm_sorted])
        del lam
        src = np.repeat(self.order, src_cnt)
        dst = np.repeat(self.order, dst_cnt)
        s_seg = np.concatenate([[0], np.cumsum(src_cnt)])[self.bounds]
        d_seg = np.concatenate([[0], np.cumsum(dst_cnt)])[self.bounds]
        del src_cnt, dst_cnt
        for c in range(self.bounds.size - 1):  # loop over communities (few), not nodes
            sc, dc = _pair(rng, src[s_seg[c] : s_seg[c + 1]], dst[d_seg[c] : d_seg[c + 1]])
            srcs.append(sc)
            dsts.append(dc)
        del src, dst
        # cross edges: second end anywhere in the graph
        if m_out > 0:
            n = self.w.size
            lam = self.w * (m_out / self.total)
            s_out = np.repeat(np.arange(n, dtype=np.int64), rng.poisson(lam))
            d_out = np.repeat(np.arange(n, dtype=np.int64), rng.poisson(lam * self._margin(np.array(m_out))))
            s_out, d_out = _pair(rng, s_out, d_out)
            srcs.append(s_out)
            dsts.append(d_out)
        return np.concatenate(srcs).astype(np.int64, copy=False), np.concatenate(dsts).astype(np.int64, copy=False)


def _canonical_keys(src: np.ndarray, dst: np.ndarray, n: int) -> np.ndarray:
    """Undirected edge keys ``min * n + max`` without self-loops (not yet deduplicated)."""
    lo, hi = np.minimum(src, dst), np.maximum(src, dst)
    keep = lo != hi
    return lo[keep] * np.int64(n) + hi[keep]


def _clique_keys(cliques: np.ndarray, n: int) -> np.ndarray:
    """Keys of all edges inside each row of ``cliques`` [n_cliques, m]."""
    if cliques.size == 0:
        return np.zeros(0, dtype=np.int64)
    iu, ju = np.triu_indices(cliques.shape[1], k=1)
    return _canonical_keys(cliques[:, iu].ravel(), cliques[:, ju].ravel(), n)


def _sample_edges(
    rng: np.random.Generator, sampler: _EdgeSampler, n: int, target: int, fixed: np.ndarray
) -> np.ndarray:
    """Distinct undirected edge keys: ``fixed`` (cliques) plus sampled edges, ``target`` in total."""
    keys = sorted_unique(fixed.copy())
    for round_ in range(6):  # first round + top-ups for the duplicates and self-loops dropped
        missing = target - keys.size
        if missing <= 0:
            break
        ask = int(missing * (1.03 if round_ == 0 else 1.5)) + 16
        src, dst = sampler.sample(rng, ask)
        new = _canonical_keys(src, dst, n)
        del src, dst
        keys = sorted_unique(np.concatenate([keys, new]))
        del new
    if keys.size > target:
        # drop a random subset of the sampled (non-clique) edges so that exactly ``target`` remain
        is_fixed = np.zeros(keys.size, dtype=bool)
        if fixed.size:
            is_fixed[np.searchsorted(keys, fixed)] = True  # every fixed key is in ``keys``
        sampled = np.flatnonzero(~is_fixed)
        extra = keys.size - target
        drop = sampled[rng.choice(sampled.size, size=min(extra, sampled.size), replace=False)]
        keep = np.ones(keys.size, dtype=bool)
        keep[drop] = False
        keys = keys[keep]
    return keys


def _farthest_candidates(
    rng: np.random.Generator, x: np.ndarray, nodes: np.ndarray, k: int, chunk: int = 4096
) -> np.ndarray:
    """For each node, the features of the farthest (Euclidean) of ``k`` random nodes."""
    out = np.empty((nodes.size, x.shape[1]), dtype=x.dtype)
    cand = rng.integers(0, x.shape[0], size=(nodes.size, k))
    for s in range(0, nodes.size, chunk):  # chunks bound memory at chunk * k * F floats
        e = min(s + chunk, nodes.size)
        diff = x[cand[s:e]] - x[nodes[s:e], None, :]
        far = np.einsum("ijk,ijk->ij", diff, diff).argmax(axis=1)
        out[s:e] = x[cand[s:e][np.arange(e - s), far]]
    return out


def _anomaly_counts(cfg: SyntheticConfig) -> tuple[int, int, int, int]:
    """(#community-swap nodes, #contextual nodes, #cliques, #camouflage nodes) for ``anomaly_fraction``."""
    total = round(cfg.nodes * cfg.anomaly_fraction)
    shares = list(cfg.anomaly_mix) + [0.0] * (4 - len(cfg.anomaly_mix))
    mix = np.asarray(shares, dtype=float) / float(sum(shares))
    n_cam = round(total * mix[3])
    left = total - n_cam
    n_cliques = min(round(total * mix[2] / cfg.clique_size), left // cfg.clique_size)
    rest = left - n_cliques * cfg.clique_size
    if mix[0] + mix[1] > 0:
        n_swap = round(rest * mix[0] / (mix[0] + mix[1]))
        return n_swap, rest - n_swap, n_cliques, n_cam
    return 0, 0, n_cliques, n_cam + (rest if mix[3] > 0 else 0)  # camouflage takes what cliques cannot hold


def camouflage_columns(features: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The camouflage signature: (columns, signs), ``features // 8`` columns (at least one), fixed by ``seed``."""
    rng = np.random.default_rng([seed, 4])  # its own stream: the other draws do not depend on it
    cols = np.sort(rng.choice(features, size=max(1, features // 8), replace=False))
    return cols, rng.choice(np.array([-1.0, 1.0], dtype=np.float32), size=cols.size)


def _word_distributions(rng: np.random.Generator, c: int, f: int) -> np.ndarray:
    """Each community's word distribution [c, f]: 0.7 of its topic (Dirichlet(0.1)) and 0.3 of a shared background."""
    topics = rng.dirichlet(np.full(f, 0.1), size=c)
    background = rng.dirichlet(np.ones(f))
    return (0.7 * topics + 0.3 * background).astype(np.float32)


def _bag_of_words(rng: np.random.Generator, q: np.ndarray, length: np.ndarray) -> np.ndarray:
    """Binary bag of words: word j of row i is present iff drawn at least once in ``length[i]`` draws from ``q[i]``
    (Poissonised: P = 1 - exp(-length * q))."""
    p = -np.expm1(-length[:, None] * q)
    return (rng.random(p.shape, dtype=np.float32) < p).astype(np.float32)


def synthesize(cfg: SyntheticConfig) -> SyntheticGraph:
    """Generate the graph and its ground truth (anomaly types, communities)."""
    cfg.validate()
    rng = np.random.default_rng(cfg.seed)
    n, f = cfg.nodes, cfg.features
    c = cfg.resolved_communities()
    n_swap, n_ctx, n_cliques, n_cam = _anomaly_counts(cfg)
    target_edges = min(round(n * cfg.avg_degree / 2), n * (n - 1) // 2)
    t0, c0 = time.perf_counter(), time.process_time()

    def done(name: str) -> None:
        log.info("%-20s done at %5.1fs wall, %5.1fs cpu", name, time.perf_counter() - t0, time.process_time() - c0)

    # 1. communities and degree weights
    community = _assign_communities(rng, n, c)
    w = _degree_weights(rng, n, cfg.avg_degree, cfg.power_law_exponent)
    done("communities/weights")

    # 2. anomaly node sets (disjoint)
    n_clique_nodes = n_cliques * cfg.clique_size
    chosen = rng.choice(n, size=n_swap + n_ctx + n_clique_nodes + n_cam, replace=False)
    swap_nodes, ctx_nodes = chosen[:n_swap], chosen[n_swap : n_swap + n_ctx]
    cliques = chosen[n_swap + n_ctx : n_swap + n_ctx + n_clique_nodes].reshape(n_cliques, cfg.clique_size)
    cam_nodes = chosen[n_swap + n_ctx + n_clique_nodes :]

    # 3. edges: cliques + Chung-Lu samples, exactly ``target_edges`` distinct undirected edges
    fixed = _clique_keys(cliques, n)
    keys = _sample_edges(rng, _EdgeSampler(w, community, cfg.mixing), n, max(target_edges, fixed.size), fixed)
    del w
    src = keys // n
    dst = keys - src * n
    del keys
    done("edges")
    indptr, indices = csr_from_edges(src, dst, n)
    del src, dst
    done("csr")

    # 4. features around community centroids, or bags of words from community topics
    words = cfg.feature_kind == "words"
    if words:
        q = _word_distributions(rng, c, f)
        length = np.maximum(rng.poisson(cfg.words, size=n), 1).astype(np.float32)
        x = _bag_of_words(rng, q[community], length)
    else:
        scale = cfg.separation * cfg.noise / math.sqrt(2.0 * f)
        centroids = (rng.standard_normal((c, f)) * scale).astype(np.float32)
        x = rng.standard_normal((n, f), dtype=np.float32)
        x *= np.float32(cfg.noise)
        x += centroids[community]
    done("features")

    # 5. anomalies: community swap, contextual (from the clean features), structural cliques
    anomaly_type = np.zeros(n, dtype=np.int8)
    if n_ctx:
        ctx_x = _farthest_candidates(rng, x, ctx_nodes, cfg.contextual_candidates)
    if n_swap:
        other = (community[swap_nodes] + rng.integers(1, max(c, 2), size=n_swap)) % max(c, 1)
        if words:
            x[swap_nodes] = _bag_of_words(rng, q[other], length[swap_nodes])
        else:
            noise = rng.standard_normal((n_swap, f), dtype=np.float32) * np.float32(cfg.noise)
            x[swap_nodes] = centroids[other] + noise
        anomaly_type[swap_nodes] = 1
    if n_ctx:
        x[ctx_nodes] = ctx_x
        anomaly_type[ctx_nodes] = 2
    anomaly_type[cliques.ravel()] = 3
    if n_cam:
        cols, signs = camouflage_columns(f, cfg.seed)
        if words:
            x[np.ix_(cam_nodes, cols)] = 1.0  # the signature words present
        else:
            x[np.ix_(cam_nodes, cols)] += signs * np.float32(cfg.camouflage_shift * cfg.noise)
        anomaly_type[cam_nodes] = 4
    if n_cliques and cfg.clique_features == "shared":  # drawn last: the other kinds' draws stay those of "own"
        members, ring = cliques.ravel(), np.repeat(np.arange(n_cliques), cfg.clique_size)
        if words:
            x[members] = _bag_of_words(rng, _word_distributions(rng, n_cliques, f)[ring], length[members])
        else:
            profiles = (rng.standard_normal((n_cliques, f)) * scale).astype(np.float32)
            noise = rng.standard_normal((members.size, f), dtype=np.float32) * np.float32(cfg.noise)
            x[members] = profiles[ring] + noise
        anomaly_type[members] = 5
    done("anomalies")

    graph = Graph(
        x=np.ascontiguousarray(x),
        indptr=indptr,
        indices=indices,
        y=(anomaly_type > 0).astype(np.int8),
        source=f"synthetic(nodes={n}, avg_degree={cfg.avg_degree}, seed={cfg.seed})",
    )
    return SyntheticGraph(graph=graph, anomaly_type=anomaly_type, community=community, config=cfg)


def generate(cfg: SyntheticConfig) -> Graph:
    """Generate the graph (``graph.y`` int8, 1 = anomaly). :func:`synthesize` also returns the types."""
    return synthesize(cfg).graph


# ----------------------------------------------------------------------------------------------------
# CLI


def _parser() -> argparse.ArgumentParser:
    from partitioning.cli import ArgumentParser, DefaultsHelpFormatter

    d = SyntheticConfig()
    p = ArgumentParser(
        prog="python -m partitioning.synthetic",
        description=(
            "Generate a large graph with communities, power-law degrees and planted anomalies "
            "(community-swap, contextual, structural and, if asked, camouflage) and write it as .npz "
            "(keys x, edge_index, y, anomaly_type, community)."
        ),
        formatter_class=DefaultsHelpFormatter,
    )
    p.add_argument("--out", required=True, type=Path, help="output .npz file (required)")
    p.add_argument("--nodes", type=int, default=d.nodes, help="number of nodes")
    p.add_argument("--avg-degree", type=float, default=d.avg_degree,
                   help="mean degree; the graph gets round(nodes * avg_degree / 2) undirected edges")
    p.add_argument("--communities", default="auto",
                   help="number of communities, or 'auto' = max(4, round(nodes ** 0.25))")
    p.add_argument("--features", type=int, default=d.features, help="feature dimensions")
    p.add_argument("--anomaly-fraction", type=float, default=d.anomaly_fraction,
                   help="fraction of nodes that are anomalies (y = 1), in [0, 0.5]")
    p.add_argument("--anomaly-mix", type=float, nargs="+", default=list(d.anomaly_mix), metavar="SHARE",
                   help="relative shares of community-swap, contextual and structural (clique) anomalies, and "
                        "optionally a fourth: camouflage (a few columns shifted by a signature that all such "
                        "nodes share; links and the other columns kept), e.g. --anomaly-mix 0 1 0 1")
    p.add_argument("--mixing", type=float, default=d.mixing,
                   help="probability that an edge's second end is drawn from the whole graph instead of "
                        "the first end's community")
    p.add_argument("--power-law-exponent", type=float, default=d.power_law_exponent,
                   help="exponent of the power-law degree distribution (> 2)")
    p.add_argument("--separation", type=float, default=d.separation,
                   help="mean distance between community centroids, in units of --noise")
    p.add_argument("--noise", type=float, default=d.noise,
                   help="standard deviation of the features around their community centroid, per dimension")
    p.add_argument("--clique-size", type=int, default=d.clique_size, help="nodes per structural-anomaly clique")
    p.add_argument("--clique-features", default=d.clique_features, choices=CLIQUE_FEATURES,
                   help="own: clique members keep their features; shared: each clique is a fraud ring whose members "
                        "take features around one profile of the ring's own (anomaly_type 5), so that they look "
                        "alike and like most of their neighbours")
    p.add_argument("--contextual-candidates", type=int, default=d.contextual_candidates,
                   help="random candidates per contextual anomaly; the farthest one's features are copied")
    p.add_argument("--camouflage-shift", type=float, default=d.camouflage_shift,
                   help="shift of each camouflage signature column, in units of --noise")
    p.add_argument("--feature-kind", default=d.feature_kind, choices=FEATURE_KINDS,
                   help="gaussian: features around community centroids (--separation, --noise); words: a binary bag "
                        "of words per node drawn from its community's topic, as in citation graphs")
    p.add_argument("--words", type=float, default=d.words,
                   help="--feature-kind words: mean number of word draws per node (Poisson, at least 1)")
    p.add_argument("--seed", type=int, default=d.seed, help="random seed (same seed, same graph)")
    p.add_argument("--compress", action="store_true", help="write a compressed .npz (smaller, much slower)")
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    return p


def _config_from_args(args: argparse.Namespace) -> SyntheticConfig:
    if str(args.communities).lower() == "auto":
        communities = None
    else:
        try:
            communities = int(args.communities)
        except ValueError:
            raise GraphInputError("--communities", f"must be an integer or 'auto', got {args.communities!r}") from None
    names = {f.name for f in fields(SyntheticConfig)}
    kw = {k: v for k, v in vars(args).items() if k in names and k != "communities"}
    kw["anomaly_mix"] = tuple(args.anomaly_mix)
    return SyntheticConfig(communities=communities, **kw)


def main(argv: list[str] | None = None) -> int:
    from partitioning.cli import setup_logging

    from partitioning.io import save_npz

    args = _parser().parse_args(argv)
    setup_logging(args.verbose)
    cfg = _config_from_args(args).validate()
    if args.out.suffix != ".npz":
        raise GraphInputError(str(args.out), "output file must end in .npz")
    log.info("config %s", asdict(cfg))
    log.info("stages: communities/weights, edges, csr, features, anomalies (timings are cumulative)")
    t0 = time.perf_counter()
    result = synthesize(cfg)
    t_gen = time.perf_counter() - t0
    save_npz(result.graph, args.out, extra=result.extra_arrays(), compress=args.compress)
    t_all = time.perf_counter() - t0
    g, types = result.graph, result.anomaly_type
    counts = np.bincount(types, minlength=6)
    rss_gib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # ru_maxrss is KiB on Linux
    print(
        f"wrote {args.out}: {g.num_nodes} nodes, {g.num_edges} undirected edges, {g.num_features} features, "
        f"{cfg.resolved_communities()} communities, {int(g.y.sum())} anomalies "
        f"(swap {counts[1]}, contextual {counts[2]}, structural {counts[3]}, camouflage {counts[4]}, "
        f"ring {counts[5]}); "
        f"generated in {t_gen:.1f}s, written in {t_all - t_gen:.1f}s; peak RSS {rss_gib:.2f} GiB"
    )
    return 0


if __name__ == "__main__":
    from partitioning.cli import run_cli

    run_cli(main, sys.argv[1:])
