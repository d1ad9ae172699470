"""Which worker trains on what: cost-balanced shares of the store and a per-epoch step plan.

Subgraphs are split by size (METHOD.md section 5):

* **small** (``nodes <= sample_threshold``): graph-level data parallelism. Each worker owns a fixed
  share, assigned greedily by longest-processing-time over a linear cost model
  ``nodes + edge_cost * csr_entries`` (so the shares are balanced by work, not by count). Per epoch a
  worker packs its share into ``B`` batches of whole subgraphs; ``B`` is the same on every worker.
  A subgraph whose whole-graph steps are capped (``max_degree``: more than ``dense_links`` CSR entries,
  trained on at most about ``max_degree`` in-links a node) costs the links it is trained on, at most
  ``nodes * max_degree`` (:func:`trained_links`).
* **large**: all workers train on it together with neighbour-sampled minibatches; each worker takes a
  fixed disjoint share of its seed nodes, and every worker does the same number of steps on it.

An epoch is one pass over the store, or, when a pass has fewer than ``min_steps`` steps (a small
store: all of it fits a batch or two), the fewest whole passes that make at least ``min_steps``
steps. Every pass has its own packing of the small subgraphs, block order and neighbour-sampling
stream, and every subgraph is seen equally often.

Everything is deterministic from (counts, rank, world size, seed, epoch), so every worker computes
the same plan shape without communicating, and DDP's collectives line up step by step.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field

import numpy as np


@dataclass
class ShardConfig:
    """How the store is divided among workers."""

    sample_threshold: int = 50_000  # subgraphs with more nodes are neighbour-sampled by all workers
    batch_cost: float = 50_000.0  # cost budget of one batch of small subgraphs (cost units ~ nodes)
    batch_size: int = 1024  # seed nodes per worker per step on a large subgraph
    edge_cost: float = 0.5  # cost of one CSR entry relative to one node
    seed: int = 0
    min_steps: int = 0  # an epoch repeats whole passes over the store until it has at least this many steps
    # whole-graph steps of more than dense_links CSR entries train on at most ~max_degree in-links a node (0: no cap)
    max_degree: int = 0
    dense_links: int = 0


@dataclass
class Step:
    """One training step of one worker.

    kind "graphs": ``subgraphs`` are whole small subgraphs batched together (identity context sync).
    kind "seeds": minibatch ``index`` of ``num_steps`` on large subgraph ``subgraphs[0]`` (all workers
    on it together; context all-reduced, memory keyed by that subgraph).
    ``rep``: which pass over the store within the epoch (see ``ShardConfig.min_steps``).
    """

    kind: str
    subgraphs: np.ndarray
    index: int = 0
    num_steps: int = 1
    rep: int = 0


@dataclass
class EpochPlan:
    steps: list[Step] = field(default_factory=list)
    passes: int = 1  # passes over the store (steps = passes x steps of one pass)

    def __len__(self) -> int:
        return len(self.steps)


def subgraph_cost(node_counts: np.ndarray, edge_counts: np.ndarray, edge_cost: float = 0.5) -> np.ndarray:
    """Linear cost model of one training pass over each subgraph: ``nodes + edge_cost * csr_entries``."""
    return np.asarray(node_counts, dtype=np.float64) + edge_cost * np.asarray(edge_counts, dtype=np.float64)


def capped_whole(node_counts: np.ndarray, edge_counts: np.ndarray, cfg: ShardConfig) -> np.ndarray:
    """Which subgraphs a pass trains whole (at most ``cfg.sample_threshold`` nodes) with capped contexts: more than
    ``cfg.dense_links`` links and a cap (``cfg.max_degree`` > 0); bool [subgraphs]."""
    nodes = np.asarray(node_counts, dtype=np.int64)
    links = np.asarray(edge_counts, dtype=np.int64)
    return (cfg.max_degree > 0) & (nodes <= cfg.sample_threshold) & (links > cfg.dense_links)


def trained_links(node_counts: np.ndarray, edge_counts: np.ndarray, cfg: ShardConfig) -> np.ndarray:
    """CSR entries a pass trains on in each subgraph: all of them, or, for a :func:`capped_whole` subgraph, at most
    ``nodes * max_degree`` (:func:`gcad_dist.data.degree_cap.cap_dense_step`'s draw)."""
    nodes = np.asarray(node_counts, dtype=np.int64)
    links = np.asarray(edge_counts, dtype=np.int64)
    cap = capped_whole(nodes, links, cfg)
    return np.where(cap, np.minimum(links, nodes * int(cfg.max_degree)), links)


def split_by_size(node_counts: np.ndarray, threshold: int) -> tuple[np.ndarray, np.ndarray]:
    """(small subgraph ids, large subgraph ids): large = more than ``threshold`` nodes."""
    node_counts = np.asarray(node_counts)
    ids = np.arange(node_counts.size, dtype=np.int64)
    large = node_counts > threshold
    return ids[~large], ids[large]


def lpt_assign(costs: np.ndarray, ids: np.ndarray, bins: int) -> list[np.ndarray]:
    """Greedy longest-processing-time assignment of ``ids`` (with ``costs[ids]``) to ``bins`` bins.

    Items go in decreasing cost (ties by id) to the currently lightest bin (ties by bin index), which
    is within 4/3 of the optimal makespan. Returns each bin's ids sorted ascending (contiguous reads).
    """
    ids = np.asarray(ids, dtype=np.int64)
    order = ids[np.lexsort((ids, -costs[ids]))] if ids.size else ids
    heap = [(0.0, b) for b in range(bins)]
    members: list[list[int]] = [[] for _ in range(bins)]
    for i in order.tolist():  # a loop over subgraphs, not nodes
        load, b = heapq.heappop(heap)
        members[b].append(i)
        heapq.heappush(heap, (load + float(costs[i]), b))
    return [np.sort(np.asarray(m, dtype=np.int64)) for m in members]


def worker_shares(
    node_counts: np.ndarray, edge_counts: np.ndarray, world: int, cfg: ShardConfig
) -> tuple[list[np.ndarray], np.ndarray]:
    """(small-subgraph share of each worker, large subgraph ids)."""
    costs = subgraph_cost(node_counts, trained_links(node_counts, edge_counts, cfg), cfg.edge_cost)
    small, large = split_by_size(node_counts, cfg.sample_threshold)
    return lpt_assign(costs, small, world), large


def idle_workers(node_counts: np.ndarray, workers: int, sample_threshold: int) -> int:
    """How many of ``workers`` get no small subgraph of their own (:func:`worker_shares`) when the store has some, but
    fewer than workers: they borrow another's in :func:`epoch_plan` and repeat its steps; else 0."""
    small = split_by_size(node_counts, sample_threshold)[0].size
    return workers - small if 0 < small < workers else 0


def seed_share(num_nodes: int, subgraph: int, rank: int, world: int, seed: int = 0) -> np.ndarray:
    """This worker's disjoint share of the seed nodes (local ids) of a large subgraph, fixed across
    epochs; the shares of all workers partition ``range(num_nodes)`` and differ in size by at most 1."""
    perm = np.random.default_rng([seed, subgraph]).permutation(num_nodes)
    return np.sort(np.array_split(perm, world)[rank])


def large_steps(num_nodes: int, world: int, batch_size: int) -> int:
    """Steps every worker does on a large subgraph: enough for the largest seed share."""
    return max(1, math.ceil(math.ceil(num_nodes / world) / batch_size))


def _pack(ids: np.ndarray, costs: np.ndarray, num_batches: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Pack ``ids`` into exactly ``num_batches`` non-empty batches of balanced cost (repeating ids when
    there are fewer ids than batches); the composition varies with ``rng`` (shuffled tie-breaking)."""
    if ids.size == 0 or num_batches == 0:
        return []
    shuffled = ids[rng.permutation(ids.size)]
    # Jitter costs slightly so that equal-cost subgraphs land in different batches from epoch to epoch.
    jitter = costs.copy()
    jitter[shuffled] = costs[shuffled] * (1.0 + 1e-3 * rng.random(shuffled.size))
    batches = lpt_assign(jitter, shuffled, num_batches)
    filler = 0
    for b in range(num_batches):
        if batches[b].size == 0:
            batches[b] = shuffled[[filler % shuffled.size]]
            filler += 1
    return batches


def passes_per_epoch(pass_steps: int, min_steps: int) -> int:
    """Whole passes over the store that make at least ``min_steps`` steps (at least 1)."""
    if pass_steps <= 0:
        return 1
    return max(1, math.ceil(min_steps / pass_steps))


def epoch_plan(
    node_counts: np.ndarray, edge_counts: np.ndarray, rank: int, world: int, epoch: int, cfg: ShardConfig
) -> EpochPlan:
    """The list of steps worker ``rank`` does in ``epoch``; every worker's list has the same length
    and the same step kind at every position. ``cfg.min_steps``: whole passes are repeated (each with
    its own packing and order) until the epoch has at least that many steps."""
    node_counts = np.asarray(node_counts, dtype=np.int64)
    costs = subgraph_cost(node_counts, trained_links(node_counts, edge_counts, cfg), cfg.edge_cost)
    shares, large = worker_shares(node_counts, edge_counts, world, cfg)
    loads = [float(costs[s].sum()) for s in shares]
    num_batches = max((math.ceil(load / cfg.batch_cost) for load in loads), default=0)
    mine = shares[rank]
    if mine.size == 0 and num_batches > 0:
        # Fewer small subgraphs than workers: borrow one so that this worker keeps step with the rest.
        small_all = np.concatenate([s for s in shares if s.size])
        mine = small_all[[rank % small_all.size]]
    large_blocks = [(sg, large_steps(int(node_counts[sg]), world, cfg.batch_size)) for sg in large.tolist()]
    pass_steps = num_batches + sum(n for _, n in large_blocks)  # the same on every worker
    passes = passes_per_epoch(pass_steps, cfg.min_steps)
    steps: list[Step] = []
    for rep in range(passes):  # a loop over passes (few), not over subgraphs
        # Pass 0 keeps the seeds of a plain epoch; later passes draw their own packing and order.
        key = [cfg.seed, epoch] if rep == 0 else [cfg.seed, epoch, 0x9A55, rep]
        rng = np.random.default_rng([*key, rank] if rep else [cfg.seed, epoch, rank])
        small_batches = _pack(mine, costs, num_batches, rng)
        # Blocks: each small batch is a block of one step; each large subgraph is a block of its steps.
        blocks: list[list[Step]] = [[Step("graphs", b, rep=rep)] for b in small_batches]
        for sg, n in large_blocks:
            blocks.append([Step("seeds", np.array([sg], dtype=np.int64), i, n, rep) for i in range(n)])
        # The block order is shared by all workers (seeded without the rank), so step kinds line up.
        order = np.random.default_rng(key).permutation(len(blocks))
        steps.extend(s for j in order.tolist() for s in blocks[j])
    return EpochPlan(steps, passes)
