"""Native (C++) edge kernels (gcad_dist/model/native.py): values and gradients against the plain autograd
versions, the counter-based dropout, and the fallback to the PyTorch kernels."""

from __future__ import annotations

import logging

import pytest
import torch

import gcad_dist.model.aggregate as agg
from gcad_dist.model import native
from gcad_dist.model.edge_update import LinkPredictor


@pytest.fixture(scope="module")
def built() -> None:
    """Build (or load from torch's extension cache) once per session; skip where it cannot be built."""
    if not native.available():
        pytest.skip(native.status())


@pytest.fixture
def force_native(monkeypatch, built) -> None:
    monkeypatch.setenv(native.ENV, "1")


def _graph(n: int, m: int, k: int, seed: int, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(n, k, generator=g, dtype=dtype)
    ei = torch.randint(0, n, (2, m), generator=g)
    ei[:, :3] = torch.tensor([[0, 1, 2], [0, 1, 2]])  # self-loops: diff exactly 0
    return h, ei


def _terms(n: int, k: int, kind: str, dtype=torch.float64):
    g = torch.Generator().manual_seed(1)
    w1 = torch.randn(k, k, generator=g, dtype=dtype) / k**0.5
    w2 = torch.randn(k, generator=g, dtype=dtype)
    if kind == "global":
        return torch.randn(n, k, generator=g, dtype=dtype), torch.randn(n, k, generator=g, dtype=dtype), w1, w2
    if kind == "bias":
        return torch.randn(k, generator=g, dtype=dtype), None, w1, w2
    return None, None, w1, w2


def _plain(h, ud, us, w1, w2, src, dst, keep=None, scale=1.0):
    z = (h[dst] - h[src]).abs() @ w1.t()
    if ud is not None:
        z = z + (ud[dst] if ud.dim() == 2 else ud)
    if us is not None:
        z = z + us[src]
    r = torch.relu(z)
    if keep is not None:
        r = r * keep * scale
    return r @ w2


@pytest.mark.parametrize("kind", ["global", "bias", "none"])
def test_link_mlp_gradcheck_float64(built, kind):
    n, k = 9, 5
    h, ei = _graph(n, 40, k, seed=0)
    ud, us, w1, w2 = _terms(n, k, kind)
    inputs = [t.requires_grad_() for t in (h, ud, us, w1, w2) if t is not None]

    def f(*args):
        it = iter(args)
        a = [next(it) if t is not None else None for t in (h, ud, us, w1, w2)]
        return native.link_mlp(*a, ei[0], ei[1], drop=0.0, seed=0, block=7)  # several blocks, last one partial

    assert torch.autograd.gradcheck(f, tuple(inputs), eps=1e-6, atol=1e-6)
    torch.testing.assert_close(f(*inputs), _plain(h, ud, us, w1, w2, ei[0], ei[1]))


@pytest.mark.parametrize("threads", [1, 3])
def test_link_mlp_target_term_on_fewer_rows(built, threads):
    """A hop-trimmed minibatch: every edge points into the first n_dst < N nodes, and the target-side term ud
    has those n_dst rows only. Values and gradients (gradcheck, fp64) match the plain version, on one
    thread and on several (40k edges: several ranges)."""
    n, n_dst, k = 12, 5, 4
    h, ei = _graph(n, 40, k, seed=3)
    ei[1] %= n_dst
    ud, us, w1, w2 = _terms(n, k, "global")
    ud = ud[:n_dst].clone()
    inputs = tuple(t.requires_grad_() for t in (h, ud, us, w1, w2))

    def f(*a):
        return native.link_mlp(*a, ei[0], ei[1], drop=0.0, seed=0, block=7)

    assert torch.autograd.gradcheck(f, inputs, eps=1e-6, atol=1e-6)
    torch.testing.assert_close(f(*inputs), _plain(*inputs, ei[0], ei[1]))
    # many edges on several threads: the same gradients as the plain autograd version
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        n, n_dst, k = 3000, 700, 8
        h, ei = _graph(n, 40_000, k, seed=4)
        ei[1] %= n_dst
        ud, us, w1, w2 = _terms(n, k, "global")
        ud = ud[:n_dst].clone()
        ins = [t.requires_grad_() for t in (h, ud, us, w1, w2)]
        g_nat = torch.autograd.grad(f(*ins).square().sum(), ins)
        g_ref = torch.autograd.grad(_plain(*ins, ei[0], ei[1]).square().sum(), ins)
        for a, b in zip(g_nat, g_ref):
            torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-9)
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("link_global", [True, False])
def test_link_predictor_native_matches_plain_autograd(force_native, monkeypatch, dtype, link_global):
    calls = []
    real = native.link_mlp
    monkeypatch.setattr(native, "link_mlp", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    torch.manual_seed(0)
    n, k = 70, 64  # h = 64: the vectorised mask paths of the kernel
    h = torch.randn(n, k, dtype=dtype, requires_grad=True)
    q = torch.randn(2, k, dtype=dtype)
    batch = (torch.arange(n) >= 35).long()
    ei = torch.randint(0, n, (2, 1500))
    fused = LinkPredictor(k, link_global).to(dtype).eval()
    plain = LinkPredictor(k, link_global, fused=False).to(dtype).eval()
    plain.load_state_dict(fused.state_dict())
    a, b = fused(h, q, ei, batch), plain(h, q, ei, batch)
    assert calls, "the native kernel was not used"
    tol = {} if dtype == torch.float64 else {"rtol": 1e-4, "atol": 1e-5}
    torch.testing.assert_close(a, b, **tol)
    ga = torch.autograd.grad(a.sin().sum(), [h, *fused.parameters()], allow_unused=True)
    gb = torch.autograd.grad(b.sin().sum(), [h, *plain.parameters()], allow_unused=True)
    for x, y in zip(ga, gb):
        if x is None or y is None:
            assert x is None and y is None
            continue
        torch.testing.assert_close(x, y, **tol)


@pytest.mark.parametrize("k", [70, 72, 136])
def test_link_mlp_float32_mask_bits_across_words(built, k):
    """fp32 with h above 64: the mask bits of an edge span two or three words, packed and unpacked 8 (AVX2) or 16
    (AVX-512) units at a time with a scalar tail (h = 70); values and gradients match the plain version in fp64 to
    fp32's rounding (a wrong mask bit would be off by a whole unit's term)."""
    h, ei = _graph(40, 900, k, seed=5)
    ud, us, w1, w2 = _terms(40, k, "global")
    ref = [t.requires_grad_() for t in (h, ud, us, w1, w2)]
    ins = [t.detach().float().requires_grad_() for t in ref]
    a = native.link_mlp(*ins, ei[0], ei[1], drop=0.0, seed=0, block=64)
    b = _plain(*ref, ei[0], ei[1])
    torch.testing.assert_close(a.double(), b, rtol=1e-4, atol=1e-4)
    for x, y in zip(torch.autograd.grad(a.sin().sum(), ins), torch.autograd.grad(b.sin().sum(), ref)):
        torch.testing.assert_close(x.double(), y, rtol=1e-4, atol=1e-5 * float(y.abs().max()))


def test_dropout_is_bernoulli_and_scaled(built):
    """With W1 = 0 and ud = 1 every pre-activation is 1, so the logit counts the kept units: kept
    fraction 1 - p, units and edges independent, scale exactly the inverse keep probability."""
    p, n, e, k = 0.3, 50, 20_000, 64
    h = torch.randn(n, k)
    ei = torch.randint(0, n, (2, e))
    ones = torch.ones(k)
    thr, scale = native.link_threshold(p)
    out, bits = torch.ops.gcad_native.link_mlp_forward(h, ones, None, torch.zeros(k, k), ones * scale, ei[0], ei[1],
                                                        thr, 12345, 333, True)
    keep = ((bits.view(-1, 1) >> torch.arange(64)) & 1).view(e, k).float()  # unit j of edge e
    assert abs(keep.mean().item() - (1 - p)) < 0.003
    assert abs(keep.mean(0) - (1 - p)).max() < 0.015  # every unit
    both = (keep[:, :-1] * keep[:, 1:]).mean().item()  # neighbouring units
    assert abs(both - (1 - p) ** 2) < 0.004
    both_e = (keep[:-1] * keep[1:]).mean().item()  # neighbouring edges
    assert abs(both_e - (1 - p) ** 2) < 0.004
    torch.testing.assert_close(out, keep.sum(1) * scale)
    assert abs(scale - 1 / (1 - p)) < 1e-8


def test_dropout_same_mask_forward_and_backward_and_follows_seed(built):
    torch.manual_seed(0)
    n, k = 20, 16
    h, ei = _graph(n, 200, k, seed=3)
    ud, us, w1, w2 = _terms(n, k, "global")
    h.requires_grad_()
    f = lambda x, seed=7: native.link_mlp(x, ud, us, w1, w2, ei[0], ei[1], drop=0.4, seed=seed, block=64)  # noqa: E731
    torch.testing.assert_close(f(h), f(h))
    assert not torch.equal(f(h), f(h, seed=8))
    assert not torch.allclose(f(h), native.link_mlp(h, ud, us, w1, w2, ei[0], ei[1], 0.0, 7, 64))
    # finite differences re-run the forward with the same seed: they match the analytic backward only
    # if the backward uses the forward's mask
    assert torch.autograd.gradcheck(f, (h,), eps=1e-6, atol=1e-6)


def test_link_predictor_training_mode_follows_manual_seed(force_native):
    lp = LinkPredictor(8, dropout=0.5).train()
    h, ei = _graph(30, 300, 8, seed=1, dtype=torch.float32)
    q, batch = torch.randn(1, 8), torch.zeros(30, dtype=torch.long)

    def run():
        torch.manual_seed(5)
        return lp(h, q, ei, batch)

    torch.testing.assert_close(run(), run())
    assert not torch.allclose(run(), lp.eval()(h, q, ei, batch))


@pytest.mark.parametrize("with_weight", [True, False])
def test_weighted_sum_native_matches_plain(force_native, monkeypatch, with_weight):
    calls = []
    real = native.weighted_sum
    monkeypatch.setattr(native, "weighted_sum", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    torch.manual_seed(0)
    x = torch.randn(25, 4, dtype=torch.float64, requires_grad=True)
    ei = torch.randint(0, 25, (2, 300))
    w = torch.rand(300, dtype=torch.float64) if with_weight else None
    if w is not None:
        w[::5] = 0.0  # removed edges
        w.requires_grad_()
    out = agg.weighted_sum(x, ei, w, num_nodes=30)
    assert calls
    ref = torch.zeros(30, 4, dtype=torch.float64).index_add(0, ei[1], x[ei[0]] * (w[:, None] if with_weight else 1.0))
    torch.testing.assert_close(out, ref)
    inputs = (x, w) if with_weight else (x,)
    assert torch.autograd.gradcheck(lambda *a: agg.weighted_sum(a[0], ei, a[1] if with_weight else None, 30),
                                    inputs, eps=1e-6, atol=1e-6)
    empty = agg.weighted_sum(x, torch.empty(2, 0, dtype=torch.long), torch.empty(0, dtype=torch.float64))
    assert empty.shape == (25, 4) and empty.abs().sum() == 0


@pytest.fixture
def threads():
    """Run the body with several torch threads (the kernels then split the edges into ranges with private
    per-node sums), restoring the count after."""
    before = torch.get_num_threads()
    yield lambda t: torch.set_num_threads(t)
    torch.set_num_threads(before)


@pytest.mark.parametrize("nodes", [300, 30_000])
@pytest.mark.parametrize("tasks", [2, 3])
@pytest.mark.parametrize("kind", ["global", "bias"])
def test_link_mlp_on_threads_matches_one_thread(built, threads, kind, tasks, nodes):
    """40k edges, 2 or 3 threads: as many edge ranges (>= 8192 edges each). Values and mask bits equal the serial
    kernel's (the dropout mask is a hash of the edge index, not of the thread). 300 nodes (dense: private copies):
    every gradient agrees to summation order. 30k nodes (sparse: owner computes): the per-node gradients (h, and
    ud / us given per node) equal the serial ones bit for bit, each node's sums taken by one task in the serial
    loop's order; only the weight sums, and a term that is one row for every edge, differ by summation order."""
    n, k, e = nodes, 16, 40_000
    h, ei = _graph(n, e, k, seed=4)
    ud, us, w1, w2 = _terms(n, k, kind)
    g = torch.randn(e, dtype=torch.float64)
    sparse = e <= tasks * n  # the kernels' owner_computes
    per_node = [sparse, sparse and ud is not None and ud.dim() == 2, sparse and us is not None, False, False]

    def run(t):
        threads(t)
        ins = [x.clone().requires_grad_() if x is not None else None for x in (h, ud, us, w1, w2)]
        out = native.link_mlp(*ins, ei[0], ei[1], drop=0.3, seed=11, block=512)
        grads = torch.autograd.grad(out, [x for x in ins if x is not None], g)
        thr, _ = native.link_threshold(0.3)
        _, bits = torch.ops.gcad_native.link_mlp_forward(h, ud, us, w1, w2, ei[0], ei[1], thr, 11, 512, True)
        return out, bits, grads

    out1, bits1, grads1 = run(1)
    out3, bits3, grads3 = run(tasks)
    assert torch.equal(out1, out3) and torch.equal(bits1, bits3)  # per-edge outputs: same arithmetic
    exact = [p for p, x in zip(per_node, (h, ud, us, w1, w2)) if x is not None]
    for a, b, same in zip(grads1, grads3, exact):
        assert a.abs().sum() > 0
        if same:
            assert torch.equal(a, b)
        else:  # weight sums: another summation order only
            torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)


def test_link_mlp_backward_in_chunks(built, threads):
    """The several-task owner backward (a sparse graph) over chunks of a few blocks (per-edge rows of one chunk at a
    time; a node's sums carried from chunk to chunk) gives the one-chunk gradients: per node bit for bit, weights to
    summation order."""
    n, k, e = 30_000, 16, 40_000
    h, ei = _graph(n, e, k, seed=5)
    ud, us, w1, w2 = _terms(n, k, "global")
    g = torch.randn(e, dtype=torch.float64)
    thr, scale = native.link_threshold(0.2)
    w2s = w2 * scale
    _, bits = torch.ops.gcad_native.link_mlp_forward(h, ud, us, w1, w2s, ei[0], ei[1], thr, 3, 512, True)
    threads(2)

    def grads(chunk):
        return torch.ops.gcad_native.link_mlp_backward(g, h, ud, us, w1, w2s, scale, ei[0], ei[1], bits, 512,
                                                       True, True, True, True, True, chunk)

    whole, chunked = grads(0), grads(3 * 512)
    for i, (a, b) in enumerate(zip(whole, chunked)):
        assert a.abs().sum() > 0
        if i < 3:
            assert torch.equal(a, b)
        else:
            torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("nodes", [200, 20_000])
@pytest.mark.parametrize("tasks", [2, 3])
def test_weighted_sum_on_threads_matches_one_thread(built, threads, tasks, nodes):
    """30k edges on 2 or 3 threads: a dense graph (private copies) agrees with the serial loop to summation order, a
    sparse one (owner computes) bit for bit."""
    x = torch.randn(nodes, 8, dtype=torch.float64)
    ei = torch.randint(0, nodes, (2, 30_000))
    w = torch.rand(30_000, dtype=torch.float64)
    w[::5] = 0  # removed edges
    g = torch.randn(nodes, 8, dtype=torch.float64)

    def run(t):
        threads(t)
        xs, ws = x.clone().requires_grad_(), w.clone().requires_grad_()
        out = native.weighted_sum(xs, ws, ei[0], ei[1], nodes)
        return (out, *torch.autograd.grad(out, [xs, ws], g))

    for a, b in zip(run(1), run(tasks)):
        if 30_000 <= tasks * nodes:  # owner computes: each node's sum is one task's, in the serial order
            assert torch.equal(a, b)
        else:
            torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)
    ref = torch.zeros(nodes, 8, dtype=torch.float64).index_add(0, ei[1], x[ei[0]] * w[:, None])
    torch.testing.assert_close(run(tasks)[0], ref)


def test_env_var_forces_the_pytorch_kernels(monkeypatch):
    monkeypatch.setenv(native.ENV, "0")
    assert not native.enabled(torch.zeros(2, 2))
    assert not native.available()

    def boom(*a, **kw):
        raise AssertionError("native kernel called with GCAD_NATIVE=0")

    monkeypatch.setattr(native, "link_mlp", boom)
    monkeypatch.setattr(native, "weighted_sum", boom)
    torch.manual_seed(0)
    lp = LinkPredictor(6, dropout=0.2).train()
    h, ei = _graph(12, 60, 6, seed=2, dtype=torch.float32)
    h.requires_grad_()
    logits = lp(h, torch.randn(1, 6), ei, torch.zeros(12, dtype=torch.long))
    out = agg.weighted_sum(h, ei, torch.sigmoid(logits))
    out.sum().backward()
    assert torch.isfinite(h.grad).all() and h.grad.abs().sum() > 0


def test_loading_leaves_the_build_flags_alone(built):
    """torch's loader appends its libraries to the flag lists it is given: the module's own lists must not be those
    (else the build name changes after the first load, and a record of it names a build that was never loaded)."""
    assert all(not f.startswith(("-l", "-L")) for f in native.CFLAGS + native.OPENMP)
    assert native.loaded_state() == f"loaded {native._build_name()}"


def test_auto_mode_on_any_thread_count_cpu_float_only(monkeypatch, built):
    monkeypatch.delenv(native.ENV, raising=False)
    x = torch.zeros(2, 2)
    for t in (1, 4):
        monkeypatch.setattr(native.torch, "get_num_threads", lambda t=t: t)
        assert native.enabled(x)
    assert "in use (4 torch threads" in native.status()
    assert not native.enabled(x.to(torch.bfloat16))
    assert not native.enabled(torch.zeros(2, 2, device="meta"))  # any non-CPU device: PyTorch kernels
    monkeypatch.setenv(native.ENV, "0")
    assert not native.enabled(x)


def test_build_failure_warns_once_and_falls_back(monkeypatch, tmp_path, caplog):
    bad = tmp_path / "broken.cpp"
    bad.write_text("this is not C++\n")
    monkeypatch.setattr(native, "SOURCE", bad)
    monkeypatch.setattr(native, "_state", {})
    monkeypatch.setenv(native.ENV, "1")
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path / "ext"))
    with caplog.at_level(logging.WARNING, logger=native.__name__):
        assert not native.enabled(torch.zeros(2, 2))
        assert not native.enabled(torch.zeros(2, 2))
    warnings = [r for r in caplog.records if "native edge kernels unavailable" in r.getMessage()]
    assert len(warnings) == 1
    assert "unavailable" in native.status()
    lp = LinkPredictor(4).eval()  # the PyTorch kernels
    h, ei = _graph(6, 20, 4, seed=0, dtype=torch.float32)
    assert lp(h, torch.zeros(1, 4), ei, torch.zeros(6, dtype=torch.long)).shape == (20,)


def test_a_dead_builds_lock_is_removed_and_a_live_one_kept(tmp_path, caplog) -> None:
    """torch waits with no limit for a build's ``lock`` file to go; one left by a killed build is removed (warned),
    a recent one (a build in progress) is left alone."""
    import os
    import time

    from gcad_dist.model.native import STALE_LOCK_SECONDS, clear_stale_lock

    lock = tmp_path / "lock"
    assert not clear_stale_lock(tmp_path)  # no lock
    lock.touch()
    assert not clear_stale_lock(tmp_path) and lock.exists()  # a build in progress
    old = time.time() - STALE_LOCK_SECONDS - 5
    os.utime(lock, (old, old))
    assert clear_stale_lock(tmp_path) and not lock.exists()
    assert "did not finish" in caplog.text
