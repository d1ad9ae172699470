"""AllReduceContextSync: 1 worker = the single-process model; 2 workers = the context of the union."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from gcad_dist.distributed.context import AllReduceContextSync
from gcad_dist.model import GCCAD, GCCADConfig
from gcad_dist.model.context import IDENTITY

N, F_IN, HID = 60, 8, 16


class Recording(AllReduceContextSync):
    """Records the context q handed to memory() at every layer."""

    def __init__(self, *a, **kw) -> None:
        super().__init__(*a, **kw)
        self.qs: list[torch.Tensor] = []

    def memory(self, layer: int, q: torch.Tensor) -> torch.Tensor:
        out = super().memory(layer, q)
        self.qs.append(out.detach().clone())
        return out


def _graph(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(N, F_IN, generator=g)
    src = torch.randint(0, N, (4 * N,), generator=g)
    dst = torch.randint(0, N, (4 * N,), generator=g)
    keep = src != dst
    ei = torch.stack([torch.cat([src[keep], dst[keep]]), torch.cat([dst[keep], src[keep]])])
    y = torch.zeros(N, dtype=torch.long)
    y[torch.randperm(N, generator=g)[: N // 6]] = 1
    return x, ei, y


def _masks() -> tuple[torch.Tensor, torch.Tensor]:
    """Two disjoint halves of the first 54 nodes; the last 6 nodes are in neither."""
    idx = torch.arange(N)
    m0 = (idx < 54) & (idx % 2 == 0)
    m1 = (idx < 54) & (idx % 2 == 1)
    return m0, m1


def _model(conv: str = "gin") -> GCCAD:
    torch.manual_seed(0)
    model = GCCAD(GCCADConfig(in_dim=F_IN, hidden=HID, num_layers=2, conv=conv, dropout=0.0))
    return model.eval()


def _con_count(y: torch.Tensor, mask: torch.Tensor) -> float:
    """Number of normal masked nodes (the contrastive loss's denominator when the graph has anomalies)."""
    return float(((y == 0) & mask).sum())


def _run(model: GCCAD, sync, x, ei, y, mask, steps: int = 2):
    """``steps`` forward passes (memory carries over); returns (q per layer of the last, con loss, grads)."""
    model.zero_grad()
    for _ in range(steps):
        if hasattr(sync, "qs"):
            sync.qs.clear()
        out = model(x, ei, context_mask=mask, sync=sync)
    loss = model.loss(out, y, mask=mask, sync=sync)
    # Weight by the local count so that the sum over workers is the union's weighted loss.
    weighted = loss["con"] * _con_count(y, mask)
    weighted.backward()
    grads = {k: p.grad.detach().clone() for k, p in model.named_parameters() if p.grad is not None}
    return [q.clone() for q in sync.qs], loss["con"].detach(), grads


def test_memory_zero_momentum_is_identity() -> None:
    s = AllReduceContextSync(momentum=0.0)
    s.set_subgraph(3)
    q = torch.randn(1, 4, requires_grad=True)
    assert s.memory(0, q) is q
    assert s.sum(q) is q  # no process group: identity
    assert s.state_dict() == {}


def test_memory_ema_gradient_only_through_q_and_state_roundtrip() -> None:
    s = AllReduceContextSync(momentum=0.75)
    s.set_subgraph(7)
    q1 = torch.ones(1, 3)
    assert torch.equal(s.memory(0, q1), q1)  # first step: buffer initialised with q
    q2 = torch.full((1, 3), 5.0, requires_grad=True)
    out = s.memory(0, q2)
    assert torch.allclose(out, torch.full((1, 3), 0.75 * 1 + 0.25 * 5))
    out.sum().backward()
    assert torch.allclose(q2.grad, torch.full((1, 3), 0.25))
    assert not s.buffers[(7, 0)].requires_grad
    s.set_subgraph(8)  # a different subgraph has its own buffer
    assert torch.equal(s.memory(0, q2), q2)
    t = AllReduceContextSync(momentum=0.75)
    t.load_state_dict(s.state_dict())
    assert set(t.buffers) == {(7, 0), (8, 0)}
    assert torch.equal(t.buffers[(7, 0)], s.buffers[(7, 0)])
    with pytest.raises(ValueError):
        AllReduceContextSync(momentum=1.0)


@pytest.mark.parametrize("conv", ["gin", "gcn"])
def test_one_worker_equals_single_process(conv: str) -> None:
    x, ei, y = _graph()
    model = _model(conv)
    torch.manual_seed(1)
    ref = model(x, ei)
    ref_loss = model.loss(ref, y)
    sync = AllReduceContextSync(momentum=0.0)
    sync.set_subgraph(0)
    out = model(x, ei, sync=sync)
    loss = model.loss(out, y, sync=sync)
    assert torch.allclose(out.q, ref.q, atol=1e-6)
    for k in ("total", "con", "link"):
        assert abs(float(loss[k]) - float(ref_loss[k])) < 1e-5
    assert float(ref_loss["con"]) > 0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, world: int, port: int, outdir: str) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        torch.set_num_threads(1)
        x, ei, y = _graph()
        mask = _masks()[rank]
        results = {}
        for beta in (0.0, 0.5):
            sync = Recording(group=dist.new_group(), momentum=beta)
            sync.set_subgraph(0)
            qs, con, grads = _run(_model(), sync, x, ei, y, mask)
            # What DDP would do to the gradients: sum over the workers.
            for g in grads.values():
                dist.all_reduce(g)
            results[beta] = {"qs": qs, "con": con, "count": _con_count(y, mask), "grads": grads}
        torch.save(results, Path(outdir) / f"rank{rank}.pt")
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_two_workers_context_equals_union(tmp_path: Path) -> None:
    mp.spawn(_worker, args=(2, _free_port(), str(tmp_path)), nprocs=2, join=True)
    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in range(2)]
    x, ei, y = _graph()
    m0, m1 = _masks()
    union = m0 | m1
    for beta in (0.0, 0.5):
        sync = Recording(momentum=beta)  # no process group: single process over the union
        sync.set_subgraph(0)
        qs, con, grads = _run(_model(), sync, x, ei, y, union)
        assert len(qs) == 2  # one context per layer
        for r in range(2):
            got = ranks[r][beta]["qs"]
            assert len(got) == len(qs)
            for q_ref, q in zip(qs, got):
                assert torch.allclose(q, q_ref, atol=1e-5), (beta, r)
        # The union's contrastive loss is the count-weighted mean of the workers' losses.
        num = sum(ranks[r][beta]["con"] * ranks[r][beta]["count"] for r in range(2))
        den = sum(ranks[r][beta]["count"] for r in range(2))
        assert den == _con_count(y, union)
        assert abs(float(num / den) - float(con)) < 1e-5
        # And the gradients summed over workers (through the differentiable all-reduce) match.
        for k, g in grads.items():
            assert torch.allclose(ranks[0][beta]["grads"][k], g, atol=1e-4), k
    # Sanity: the context of one half alone differs from the union's (the test can fail).
    alone = Recording()
    _run(_model(), alone, x, ei, y, m0)
    assert not torch.allclose(alone.qs[-1], qs[-1], atol=1e-4)
    assert IDENTITY.sum(qs[-1]) is qs[-1]
