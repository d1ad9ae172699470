"""A worker's training steps over the Zarr store: its share of subgraphs, read once and cached.

:class:`StoreDataset` turns a :class:`~gcad_dist.data.sharding.EpochPlan` into ready-to-train
:class:`TrainBatch` objects:

* "graphs" steps: several whole small subgraphs as one PyG ``Batch`` (context per graph, all nodes in
  the context and the loss; identity context sync);
* "seeds" steps: a neighbour-sampled minibatch of this worker's share of a large subgraph's seed nodes
  (:class:`~gcad_dist.data.neighbor_loader.SubgraphNeighborLoader`); the context and loss masks are the
  seeds, and the context is all-reduced across the workers (they are all on this subgraph).

Subgraphs are read whole (one contiguous block of the store each) and kept in an LRU cache bounded
in bytes, so after the first epoch a worker reads nothing. Batches are prepared in a background
thread (``prefetch`` ahead); :attr:`StoreDataset.wait_time` is the time the trainer spent waiting.
When a GPU worker samples on its GPU, that thread works on a CUDA stream of its own
(:class:`~gcad_dist.data.cuda_handoff.SideStream`), so its kernels and its host synchronisations do not
queue behind the training step's; each batch is handed over with an event.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import Batch, Data

from gcad_dist.data.cuda_handoff import SideStream
from gcad_dist.data.neighbor_loader import SubgraphNeighborLoader, timed
from gcad_dist.data.sampler import resolve_backend
from gcad_dist.data.sharding import EpochPlan, ShardConfig, Step, epoch_plan, seed_share

log = logging.getLogger(__name__)

_DONE = object()


@dataclass
class TrainBatch:
    """One step's input. ``key`` names the large subgraph (memory buffer) or is None; ``shared`` says
    whether all workers are on the same subgraph (all-reduce the context) or each has its own graphs."""

    x: Tensor
    edge_index: Tensor
    y: Tensor
    batch: Tensor | None
    num_graphs: int
    context_mask: Tensor | None
    loss_mask: Tensor | None
    key: int | None
    shared: bool
    num_seeds: int  # nodes whose loss is used (seed nodes, or all nodes of the batched graphs)
    num_edges: int  # edges in the step's computation graph (sampled edges for "seeds" steps)
    step: Step
    num_sampled_nodes: list[int] | None = None  # per hop, for trimming the later layers (seed steps)
    num_sampled_edges: list[int] | None = None

    def tensors(self) -> list[Tensor]:
        """The batch's tensors (for :meth:`SideStream.receive`)."""
        return [t for t in (self.x, self.edge_index, self.y, self.batch, self.context_mask, self.loss_mask)
                if t is not None]

    def to(self, device: torch.device) -> TrainBatch:
        move = lambda t: None if t is None else t.to(device, non_blocking=True)  # noqa: E731
        return TrainBatch(
            move(self.x), move(self.edge_index), move(self.y), move(self.batch), self.num_graphs,
            move(self.context_mask), move(self.loss_mask), self.key, self.shared, self.num_seeds,
            self.num_edges, self.step, self.num_sampled_nodes, self.num_sampled_edges,
        )


def _nbytes(data: Data) -> int:
    return int(sum(v.numel() * v.element_size() for _, v in data.items() if isinstance(v, Tensor)))


class StoreDataset:
    """Worker ``rank`` of ``world``: its steps per epoch, read from ``reader`` (a StoreReader).

    Args:
        reader: an open :class:`partitioning.store.reader.StoreReader` (or anything with
            ``node_counts``, ``edge_counts`` and ``get(i) -> Data``).
        fanouts: neighbours per hop for large subgraphs.
        backend: neighbour-sampling backend (``"auto"`` = fastest installed).
        cache_bytes: bound on the subgraphs kept in memory.
        prefetch: steps prepared ahead in a background thread (0 = in the caller's thread).
        device: where large subgraphs are sampled. ``"cpu"``, or the training GPU: each sampled subgraph's
            CSR and features then live on the GPU and its minibatches are drawn there by the built-in
            sampler (the C++ backends sample on the CPU only), so the host no longer gathers and copies
            every minibatch. Whole-graph steps are built on the CPU either way.
    """

    def __init__(
        self,
        reader,
        rank: int,
        world: int,
        cfg: ShardConfig,
        fanouts: Sequence[int] = (10, 5),
        backend: str = "auto",
        cache_bytes: int = 4 << 30,
        prefetch: int = 2,
        device: torch.device | str = "cpu",
    ) -> None:
        self.reader = reader
        self.rank, self.world, self.cfg = rank, world, cfg
        self.fanouts = [int(f) for f in fanouts]
        self.device = torch.device(device)
        if self.device.type != "cpu":
            if backend not in ("auto", "builtin"):
                raise ValueError(f"backend {backend!r} samples on the CPU only; sampling on {self.device} "
                                 "needs the built-in sampler (backend auto or builtin)")
            backend = "builtin"
        self.backend = resolve_backend(backend)
        self.cache_bytes = int(cache_bytes)
        self.prefetch = int(prefetch)
        self.node_counts = np.asarray(reader.node_counts, dtype=np.int64)
        self.edge_counts = np.asarray(reader.edge_counts, dtype=np.int64)
        self._cache: OrderedDict[int, Data] = OrderedDict()
        self._cached_bytes = 0
        self._loaders: dict[int, SubgraphNeighborLoader] = {}
        self.wait_time = 0.0
        self.read_time = 0.0

    # -- plan --------------------------------------------------------------------------------
    def plan(self, epoch: int) -> EpochPlan:
        return epoch_plan(self.node_counts, self.edge_counts, self.rank, self.world, epoch, self.cfg)

    def steps_per_epoch(self) -> int:
        """Same for every epoch and every worker (``cfg.min_steps`` counted in)."""
        return len(self.plan(0))

    def passes_per_epoch(self) -> int:
        """Passes over the store per epoch (> 1 when one pass has fewer than ``cfg.min_steps`` steps)."""
        return self.plan(0).passes

    # -- reading -----------------------------------------------------------------------------
    def subgraph(self, i: int) -> Data:
        """Subgraph ``i`` as Data (x, edge_index, y, ...), from the cache or read from the store."""
        d = self._cache.get(i)
        if d is not None:
            self._cache.move_to_end(i)
            return d
        t0 = time.perf_counter()
        d = self.reader.get(int(i))
        self.read_time += time.perf_counter() - t0
        d.y = d.y.long()
        size = _nbytes(d)
        if size <= self.cache_bytes:
            self._cache[i] = d
            self._cached_bytes += size
            while self._cached_bytes > self.cache_bytes:
                j, old = self._cache.popitem(last=False)
                self._cached_bytes -= _nbytes(old)
                self._loaders.pop(j, None)
        return d

    def _loader(self, sg: int) -> SubgraphNeighborLoader:
        ld = self._loaders.get(sg)
        if ld is None:
            data = self.subgraph(sg)
            share = seed_share(int(data.num_nodes), sg, self.rank, self.world, self.cfg.seed)
            # C++ samplers draw from torch's global RNG: let the loader run them in its own thread
            # (unseeded there) rather than re-seed the global RNG from our prefetch thread.
            inner_prefetch = 0 if self.backend == "builtin" else 2
            dev = self.device  # sampling on a GPU: the loader's copy of the subgraph lives there
            ld = SubgraphNeighborLoader(
                Data(x=data.x.to(dev), edge_index=data.edge_index.to(dev), y=data.y.to(dev),
                     num_nodes=data.num_nodes),
                self.fanouts, self.cfg.batch_size, shuffle=True, backend=self.backend,
                seed=self.cfg.seed * 7919 + sg * 31 + self.rank, seeds=torch.from_numpy(share),
                prefetch=inner_prefetch,
            )
            if sg in self._cache:
                self._loaders[sg] = ld
        return ld

    # -- steps -------------------------------------------------------------------------------
    def _graph_batch(self, step: Step) -> TrainBatch:
        datas = [self.subgraph(int(i)) for i in step.subgraphs]
        if len(datas) == 1:
            d = datas[0]
            x, ei, y, batch, g = d.x, d.edge_index, d.y, None, 1
        else:
            b = Batch.from_data_list([Data(x=d.x, edge_index=d.edge_index, y=d.y) for d in datas])
            x, ei, y, batch, g = b.x, b.edge_index, b.y, b.batch, len(datas)
        return TrainBatch(x, ei, y, batch, g, None, None, None, False, int(x.size(0)), int(ei.size(1)), step)

    def _seed_batch(self, d: Data, step: Step) -> TrainBatch:
        n = int(d.num_nodes)
        seeds = torch.zeros(n, dtype=torch.bool, device=d.x.device)
        seeds[: int(d.batch_size)] = True
        sg = int(step.subgraphs[0])
        return TrainBatch(d.x, d.edge_index, d.y, None, 1, seeds, seeds, sg, True, int(d.batch_size),
                          int(d.edge_index.size(1)), step, list(d.num_sampled_nodes), list(d.num_sampled_edges))

    def _produce(self, epoch: int, start: int) -> Iterator[TrainBatch]:
        steps = self.plan(epoch).steps
        it: Iterator[Data] | None = None
        it_sg = -1
        for pos in range(start, len(steps)):
            step = steps[pos]
            if step.kind == "graphs":
                yield self._graph_batch(step)
                continue
            sg = int(step.subgraphs[0])
            if it is None or it_sg != sg or step.index == 0:
                ld = self._loader(sg)
                # Sampling stream of (epoch, pass): a pass uses at most two (a worker whose seed share
                # runs out starts over once), so passes 0..499 of an epoch never share a stream.
                ld.set_epoch(epoch * 1000 + 2 * step.rep)
                it, it_sg = iter(ld), sg
                for _ in range(step.index):  # resuming mid-subgraph: skip the batches already done
                    it = self._next_cycling(ld, it)[1]
            d, it = self._next_cycling(self._loader(sg), it)
            yield self._seed_batch(d, step)

    @staticmethod
    def _next_cycling(ld: SubgraphNeighborLoader, it: Iterator[Data]) -> tuple[Data, Iterator[Data]]:
        """Next batch; a worker whose seed share ran out starts over (all do the same step count)."""
        d = next(it, None)
        if d is None:
            it = iter(ld)
            d = next(it)
        return d, it

    def iter_epoch(self, epoch: int, start: int = 0) -> Iterator[TrainBatch]:
        """The steps of ``epoch`` from position ``start`` (to resume mid-epoch)."""
        self.wait_time = 0.0
        gen = self._produce(epoch, start)
        if self.prefetch <= 0:
            yield from timed(gen, self)
            return
        q: queue.Queue = queue.Queue(maxsize=self.prefetch)
        stop = threading.Event()
        side = SideStream(self.device)  # a no-op unless this worker samples on a GPU

        def work() -> None:
            try:
                with side.context():
                    for item in gen:
                        handed = side.send(item)
                        while not stop.is_set():
                            try:
                                q.put(handed, timeout=0.1)
                                break
                            except queue.Full:
                                continue
                        if stop.is_set():
                            return
                q.put(_DONE)
            except BaseException as exc:  # noqa: BLE001 - re-raised in the consumer
                q.put(exc)

        th = threading.Thread(target=work, daemon=True, name="store-prefetch")
        th.start()
        try:
            while True:
                t0 = time.perf_counter()
                item = q.get()
                self.wait_time += time.perf_counter() - t0
                if item is _DONE:
                    return
                if isinstance(item, BaseException):
                    raise item
                yield side.receive(item)
        finally:
            stop.set()
