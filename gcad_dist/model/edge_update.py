"""Edge update (METHOD section 1.1): context-aware link predictor, Gumbel link remover, edge residual.

Edge ``e = (j -> i)`` with ``j = edge_index[0]`` (source) and ``i = edge_index[1]`` (target), PyG's
``source_to_target`` flow, as in the reference code. On an undirected graph both directions are
predicted separately (the MLP is not symmetric in the two ``h - q`` terms).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.distributions import RelaxedBernoulli

from . import native
from .aggregate import edge_chunk
from .precision import fp32_kernel


EDGE_CHUNK = 32_768  # edges per block of the fused link MLP on a CPU: its [chunk, h] temporaries stay in cache


def _drop_threshold(p: float) -> tuple[int, float]:
    """(int16 threshold, keep probability) of :func:`_chunk_keep_mask` for drop probability ``p``."""
    threshold = round(p * 65536) - 32768
    return threshold, 1.0 - (threshold + 32768) / 65536


def _chunk_keep_mask(rows: int, cols: int, p: float, seed: int, chunk: int, like: Tensor) -> Tensor:
    """Float 0/1 [rows, cols], 0 = dropped: one edge block's dropout mask, re-creatable from ``seed``.

    Draws 64 random bits per four entries and compares 16-bit slices with round(p * 2^16), so the
    drop probability is p to within 2^-17, in float arithmetic (bool masks are several times slower
    to build and apply on CPU); about 4x faster than ``torch.rand(...) >= p``.
    """
    gen = torch.Generator(device=like.device)
    gen.manual_seed(seed + chunk)
    n = rows * cols
    bits = torch.randint(-(2**63), 2**63 - 1, ((n + 3) // 4,), generator=gen, device=like.device, dtype=torch.int64)
    u16 = bits.view(torch.int16)[:n].view(rows, cols)  # uniform on [-2^15, 2^15)
    # u >= t  <=>  clamp(u - t + 1, 0, 1) == 1 for integers u, t
    return u16.to(like.dtype).sub_(_drop_threshold(p)[0] - 1).clamp_(0.0, 1.0)


class _LinkMLP(torch.autograd.Function):
    """logits_e = w2 . Dropout(ReLU(W1 |h_dst - h_src| + u_dst[dst] + u_src[src])), block by block.

    The straightforward autograd graph keeps about ten [E, h] tensors alive (gathers, difference,
    its sign, pre-activation, dropout mask, ...), which on a graph of a million edges is gigabytes
    of memory traffic per layer. This function walks the edges in blocks of :data:`EDGE_CHUNK`,
    keeps nothing per edge for the backward pass but the indices, and recomputes each block's
    activations there (activation checkpointing at the granularity of a cache-sized block). The
    dropout mask of a block is regenerated from a per-call seed drawn from torch's generator, so
    results are reproducible under ``torch.manual_seed``. The 1 / (1 - p) scale is folded into w2.
    """

    @staticmethod
    def _block(h, ud, us, w1, src, dst, drop, seed, c, lo, hi):
        s, d = src[lo:hi], dst[lo:hi]
        diff = h.index_select(0, d).sub_(h.index_select(0, s))
        a = diff.abs()
        r = torch.mm(a, w1.t())
        if ud is not None:  # [N, h] per target node, or one [h] vector (the bias) for every edge
            r.add_(ud.index_select(0, d) if ud.dim() == 2 else ud)
        if us is not None:
            r.add_(us.index_select(0, s))
        torch.relu_(r)
        if drop > 0:
            r.mul_(_chunk_keep_mask(hi - lo, w1.size(0), drop, seed, c, r))
        return s, d, diff, a, r  # r = ReLU(z) * keep >= 0, so sign(r) = ReLU'(z) * keep

    @staticmethod
    def forward(ctx, h, ud, us, w1, w2, src, dst, drop: float, seed: int, chunk: int):  # noqa: D102
        e = src.numel()
        out = h.new_empty(e)
        w2s = w2 / _drop_threshold(drop)[1] if drop > 0 else w2
        for c, lo in enumerate(range(0, e, chunk)):
            hi = min(lo + chunk, e)
            r = _LinkMLP._block(h, ud, us, w1, src, dst, drop, seed, c, lo, hi)[4]
            torch.mv(r, w2s, out=out[lo:hi])
        ctx.save_for_backward(h, ud, us, w1, w2, src, dst)
        ctx.drop, ctx.seed, ctx.chunk = drop, seed, chunk
        return out

    @staticmethod
    def backward(ctx, g_out):  # noqa: D102
        with fp32_kernel(g_out.device.type):  # backward() called inside an autocast region: stay fp32
            return _LinkMLP._backward(ctx, g_out)

    @staticmethod
    def _backward(ctx, g_out):
        h, ud, us, w1, w2, src, dst = ctx.saved_tensors
        need_h, need_ud, need_us, need_w1, need_w2 = ctx.needs_input_grad[:5]
        g_h = torch.zeros_like(h) if need_h else None
        g_ud = torch.zeros_like(ud) if (need_ud and ud is not None) else None
        g_us = torch.zeros_like(us) if (need_us and us is not None) else None
        g_w1 = torch.zeros_like(w1) if need_w1 else None
        g_w2 = torch.zeros_like(w2) if need_w2 else None
        e, chunk = src.numel(), ctx.chunk
        scale = 1.0 / _drop_threshold(ctx.drop)[1] if ctx.drop > 0 else 1.0
        w2s = w2 * scale
        g_out = g_out.contiguous()
        for c, lo in enumerate(range(0, e, chunk)):
            hi = min(lo + chunk, e)
            s, d, diff, a, r = _LinkMLP._block(h, ud, us, w1, src, dst, ctx.drop, ctx.seed, c, lo, hi)
            g = g_out[lo:hi]
            if g_w2 is not None:
                g_w2.addmv_(r.t(), g, alpha=scale)
            g_z = torch.outer(g, w2s).mul_(torch.sign(r))
            if g_ud is not None:
                if ud.dim() == 2:
                    g_ud.index_add_(0, d, g_z)
                else:
                    g_ud.add_(g_z.sum(0))
            if g_us is not None:
                g_us.index_add_(0, s, g_z)
            if g_w1 is not None:
                g_w1.addmm_(g_z.t(), a)
            if g_h is not None:
                g_diff = torch.mm(g_z, w1).mul_(torch.sign(diff))
                g_h.index_add_(0, d, g_diff)
                g_h.index_add_(0, s, g_diff.neg_())
        return g_h, g_ud, g_us, g_w1, g_w2, None, None, None, None, None


class LinkPredictor(nn.Module):
    """p_ij = sigmoid(MLP([|h_i - h_j|, h_i - q, h_j - q])), MLP = Linear(3h,h) -> ReLU -> Dropout -> Linear(h,1).

    With ``link_global=False`` the input is ``|h_i - h_j|`` only and the first layer is Linear(h, h).

    The first Linear is applied without materialising the [E, 3h] concatenation: its weight is
    split into three [h, h] blocks; the two ``h - q`` blocks (and the bias) are applied once per
    *node* ([N, h]) and gathered per edge, so the per-edge work is one [E, h] x [h, h] product
    (identical result). The per-edge part runs in the fused, blocked :class:`_LinkMLP`, or on CPU in
    its native (C++) version :func:`gcad_dist.model.native.link_mlp` when available (see
    :mod:`gcad_dist.model.native`; its dropout draws another random stream); set ``fused = False`` for
    the plain autograd version, kept as the reference in the tests. Under
    autocast the fused part runs in fp32 (inputs cast, autocast off; see
    :mod:`gcad_dist.model.precision`), so the per-edge logits are fp32 either way.
    """

    def __init__(self, hidden: int, link_global: bool = True, dropout: float = 0.1, fused: bool = True) -> None:
        super().__init__()
        self.hidden = hidden
        self.link_global = link_global
        self.lin1 = nn.Linear(3 * hidden if link_global else hidden, hidden)
        self.dropout = nn.Dropout(dropout)
        self.lin2 = nn.Linear(hidden, 1)
        self.fused = fused

    def folds_source_term(self, h: Tensor, q: Tensor, num_dst: int | None) -> bool:
        """Whether :meth:`forward` takes the one-graph trimmed form, whose source term W3 h is then all it reads
        of the non-target rows (so a caller may pass it precomputed, see :meth:`source_term_through`)."""
        return self.link_global and num_dst is not None and num_dst < h.size(0) and q.size(0) == 1

    def source_term_through(self, proj: nn.Linear, x: Tensor) -> Tensor:
        """W3 proj(x) = x (W3 W_in)^T + W3 b_in: the source term of ``h = proj(x)`` from the input rows, one
        product whose backward has no [N, h] gradient for ``h`` (cheaper when x has no more columns than h)."""
        w_src = self.lin1.weight[:, 2 * self.hidden :]
        return F.linear(x, w_src @ proj.weight, w_src @ proj.bias)

    def forward(self, h: Tensor, q: Tensor, edge_index: Tensor, batch: Tensor, num_dst: int | None = None,
                source_term: Tensor | None = None) -> Tensor:
        """Return the link logits [E] (p = sigmoid(logits)). ``num_dst``: every edge points into the first
        ``num_dst`` nodes (a hop-trimmed minibatch), so the target-side term is computed for those only.
        ``source_term``: W3 h precomputed (only where :meth:`folds_source_term`)."""
        src, dst = edge_index[0], edge_index[1]
        k = self.hidden
        w = self.lin1.weight  # [h, 3h] or [h, h]
        ud = us = None
        if self.link_global:
            # per node: W2 (h - q) + b for the target side, W3 (h - q) for the source side
            if self.folds_source_term(h, q, num_dst):
                # one graph (a minibatch): an edge's two nodes share q, so the context terms fold into the
                # target side, W2 (h_d - q) + W3 (h_s - q) + b = W2 h_d + [b - (W2 + W3) q] + W3 h_s, and
                # the source side is W3 h for every node, with no [N, h] pass for h - q (nor its backward)
                w_dst, w_src = w[:, k : 2 * k], w[:, 2 * k :]
                ud = F.linear(h[:num_dst], w_dst, self.lin1.bias - F.linear(q[0], w_dst + w_src))
                us = F.linear(h, w_src) if source_term is None else source_term
            elif num_dst is not None and num_dst < h.size(0):
                rel = h - q.index_select(0, batch)  # [N, h]: distance of each node to its graph's context
                # two products (the target side on the first num_dst rows only), so that no [N, 2h] gradient
                # is assembled from slices
                ud = F.linear(rel[:num_dst], w[:, k : 2 * k], self.lin1.bias)
                us = F.linear(rel, w[:, 2 * k :])
            else:  # one product: full-batch results stay bit-identical to the earlier releases
                rel = h - q.index_select(0, batch)
                u = F.linear(rel, torch.cat([w[:, k : 2 * k], w[:, 2 * k :]], dim=0))  # [N, 2h]
                ud, us = u[:, :k] + self.lin1.bias, u[:, k:]
        else:
            ud = self.lin1.bias  # one vector for every edge
        w1 = w[:, :k]
        if self.fused:
            drop = self.dropout.p if self.training else 0.0
            seed = int(torch.randint(0, 2**62, (1,)).item()) if drop > 0 else 0
            w2 = self.lin2.weight[0]
            with fp32_kernel(h.device.type) as autocast_on:
                if autocast_on:  # the fused kernel runs in fp32 (gcad_dist.model.precision)
                    h, w1, w2 = h.float(), w1.float(), w2.float()
                    ud = None if ud is None else ud.float()
                    us = None if us is None else us.float()
                if native.enabled(h, src):
                    logits = native.link_mlp(h, ud, us, w1, w2, src, dst, drop, seed)
                else:
                    logits = _LinkMLP.apply(h, ud, us, w1, w2, src, dst, drop, seed, edge_chunk(h, EDGE_CHUNK))
                return logits + self.lin2.bias
        diff = (h.index_select(0, dst) - h.index_select(0, src)).abs()
        if us is None:
            z = F.linear(diff, w1, ud)
        else:
            z = torch.addmm(ud.index_select(0, dst) + us.index_select(0, src), diff, w1.t())
        z = self.dropout(F.relu(z))
        return self.lin2(z).squeeze(-1)


def straight_through_sample(logits: Tensor, temperature: float) -> Tensor:
    """Hard 0/1 keep indicator I ~ RelaxedBernoulli(temperature, logits) with straight-through gradient.

    Forward value is exactly 0 or 1 (relaxed sample rounded at 0.5); backward uses the gradient of
    the relaxed sample.
    """
    soft = RelaxedBernoulli(
        torch.as_tensor(temperature, dtype=logits.dtype, device=logits.device),
        logits=logits,
        validate_args=False,
    ).rsample()
    hard = (soft > 0.5).to(soft.dtype)
    return hard + (soft - soft.detach())


EVAL_RULES = ("threshold", "expected")


class EdgeUpdate(nn.Module):
    """One layer's edge update: w^(l) = (alpha w^(l-1) + (1 - alpha) p) * I, alpha = sigmoid(learned scalar).

    Training: I from the straight-through relaxed Bernoulli sample, so an edge is kept with
    probability exactly p (the binary-concrete sample exceeds 1/2 iff logit + logistic noise > 0).
    Evaluation (deterministic), by ``eval_rule``:

    * ``"threshold"``: I = [p > 0.5], METHOD.md section 1;
    * ``"expected"``: I = p, the expectation of the training-time indicator, so that evaluation sees
      the graph training saw on average (with p near 0.5 the threshold rule keeps or drops almost
      every edge, whatever training did).

    Removed edges stay in ``edge_index`` with weight 0 (every node update treats a zero weight as a
    removed edge exactly, see :mod:`gcad_dist.model.node_update`).
    """

    def __init__(
        self, hidden: int, link_global: bool = True, dropout: float = 0.1, temperature: float = 0.6,
        eval_rule: str = "threshold",
    ) -> None:
        super().__init__()
        if eval_rule not in EVAL_RULES:
            raise ValueError(f"eval_rule must be one of {EVAL_RULES}, got {eval_rule!r}")
        self.predictor = LinkPredictor(hidden, link_global, dropout)
        self.temperature = temperature
        self.eval_rule = eval_rule
        self.alpha_logit = nn.Parameter(torch.zeros(()))

    @property
    def alpha(self) -> Tensor:
        return torch.sigmoid(self.alpha_logit)

    def forward(
        self, h: Tensor, q: Tensor, edge_index: Tensor, batch: Tensor, w_prev: Tensor, num_dst: int | None = None,
        source_term: Tensor | None = None,
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Return (w [E], p [E], logits [E]); ``num_dst`` and ``source_term`` as in :meth:`LinkPredictor.forward`."""
        logits = self.predictor(h, q, edge_index, batch, num_dst, source_term)
        p = torch.sigmoid(logits)
        if self.training:
            keep = straight_through_sample(logits, self.temperature)
        elif self.eval_rule == "expected":
            keep = p
        else:
            keep = (logits > 0).to(p.dtype)
        alpha = self.alpha
        w = (alpha * w_prev + (1.0 - alpha) * p) * keep
        return w, p, logits
