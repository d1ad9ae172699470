"""Gradients averaged by hand over workers (gcad_dist.distributed.grad_sync), on two gloo processes: the mean of the
workers' gradients on every worker, for a parameter one worker did not use too; and the local recipe's model, which DDP
did not average (its loss applies the head after forward), stepping as one model on both workers."""

from __future__ import annotations

import os
import socket

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from gcad_dist.distributed.grad_sync import average_gradients


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, world: int, port: int, out: dict) -> None:
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        torch.set_num_threads(1)
        a, b, c = (torch.nn.Parameter(torch.zeros(s)) for s in ((3, 2), (4,), (2,)))
        a.grad = torch.full((3, 2), float(rank + 1))
        b.grad = torch.arange(4.0) * (rank + 1)
        if rank == 1:
            c.grad = torch.tensor([2.0, 4.0])  # rank 0 never used c
        d = torch.nn.Parameter(torch.ones(2))  # used by no worker
        average_gradients([a, b, c, d])
        out[f"simple{rank}"] = [a.grad.clone(), b.grad.clone(), c.grad.clone()]
        out[f"unused{rank}"] = None if d.grad is None else d.grad.clone()

        # the local recipe's model: each rank its own swaps, as in pre-training; by hand the steps stay one model
        from gcad_dist.data.online_corruption import draw_member_swaps
        from gcad_dist.model import GCCAD, GCCADConfig

        torch.manual_seed(0)
        model = GCCAD(GCCADConfig(in_dim=12, hidden=16, contrast="local", loss="logistic", tau=0.2, ensemble=3))
        params = [p for p in model.parameters() if p.requires_grad]
        opt = torch.optim.Adam(params, lr=1e-2)
        g = torch.Generator().manual_seed(7)
        x, ei = torch.randn(200, 12, generator=g), torch.randint(0, 200, (2, 2000), generator=g)
        torch.manual_seed(100 + rank)
        for _ in range(3):
            y, pick, donor = draw_member_swaps(torch.zeros(200, dtype=torch.long), None, 0.15, 3)
            loss = model.loss(model(x, ei, member_swaps=(pick, donor)), y)["total"]
            opt.zero_grad()
            loss.backward()
            average_gradients(params)
            opt.step()
        out[f"model{rank}"] = torch.cat([p.detach().flatten() for p in params])
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_two_workers_average_their_gradients_and_stay_one_model() -> None:
    with mp.Manager() as manager:
        out = manager.dict()
        mp.spawn(_worker, args=(2, _port(), out), nprocs=2)
        got = dict(out)
    for r in (0, 1):
        a, b, c = got[f"simple{r}"]
        torch.testing.assert_close(a, torch.full((3, 2), 1.5))
        torch.testing.assert_close(b, torch.arange(4.0) * 1.5)
        torch.testing.assert_close(c, torch.tensor([1.0, 2.0]))  # rank 1's gradient over two workers
        assert got[f"unused{r}"] is not None and not got[f"unused{r}"].any()  # no worker used it: zeros
    assert torch.equal(got["model0"], got["model1"])  # the same weights on both workers, bitwise


def test_one_process_leaves_gradients_alone() -> None:
    p = torch.nn.Parameter(torch.zeros(3))
    p.grad = torch.ones(3)
    average_gradients([p])
    assert torch.equal(p.grad, torch.ones(3))
