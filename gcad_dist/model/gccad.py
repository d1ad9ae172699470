"""GCCAD: the context-aware graph contrastive anomaly detector (METHOD.md sections 1-3).

Public API: :class:`GCCADConfig` (the one settings dataclass), :class:`GCCAD` (the model:
``forward`` -> :class:`GCCADOutput`, ``loss``, ``score``).

Choices where METHOD.md leaves room (all documented here, tested in tests/test_model.py):

* **Score** (METHOD section 3): ``1 - cos(h_i^(L), q^(L))`` on the *encoder's* final embeddings
  and context (before the projection head), as METHOD.md states. ``score_space="projection"``
  scores with the projection head's outputs instead (what the reference code did).
* **CE ablation**: a classifier head on ``h_i^(L)`` trained with cross-entropy (plus the link
  loss); the score is the softmax anomaly probability. ``loss()["con"]`` then holds the CE term.
* **Contrast** (``contrast``, beyond METHOD.md): ``"graph"`` (default, the paper's) contrasts each node with
  its graph's context q. ``"neighbors"`` contrasts h_i^(L) with the mean of its neighbours' h_j^(L)
  (a local context, one per node); ``"ego"`` contrasts the node's own input projection h_i^(0) (its
  features only, no message passing) with that neighbour mean, so that a node's representation does
  not already contain the context it is compared with. Same loss shape (normal nodes' agreement against
  every abnormal node's of the graph), same score 1 - cos(self, context). The local contrasts score in
  the projection space, where they are trained (``"neighbors"`` honours ``score_space``), and turn off
  hop trimming (the neighbours' final embeddings are needed). ``"local"`` contrasts h_i^(0) with the mean of
  the neighbours' h_j^(0): no message passing on either side, so nothing of the node reaches its context and
  nothing of the context is smoothed into the node (the label-free default of GCCAD-pre: message passing
  was found to smooth a swapped node's features into its neighbours' and theirs into it, BENCHMARKS.md).
  The GCCAD layers (link remover, node and graph updates) are then skipped: ``forward`` computes h^(0) alone
  (``out.h = out.h0``, no link logits, so no link loss), and the model is the input projection and the head.
* **Loss** (``loss``): ``"contrastive"`` (METHOD.md) ranks each normal node's agreement against every abnormal
  node's of its graph; ``"logistic"`` (beyond METHOD.md) is a per-node logistic loss on the same cosine,
  ``BCE(cos_i / tau, 1 - y_i)``: each node is judged on its own agreement with its context, not against the
  graph's abnormal nodes (label-free pre-training with corruptions redrawn every step learns more from it,
  BENCHMARKS.md). Same score, 1 - cos.
* **Jumping knowledge** (``jump``, beyond METHOD.md): ``"last"`` (default) contrasts and scores the last
  layer's h^(L) against q^(L). ``"cat"`` concatenates every layer's embedding, h^(0) (the input projection:
  the node's own features) to h^(L), and every layer's context q^(0) to q^(L) (PyG's
  ``JumpingKnowledge("cat")``), so the head also sees what message passing did not mix. Graph contrast only.
  ``"cat-local"``: the same embedding, but each node's first context block is the mean of its neighbours' h^(0)
  instead of the graph's q^(0) (:meth:`GCCAD.graph_context`): the node's own features are contrasted with its
  neighbours', as in GCCAD-pre's local recipe, and the layers' outputs with the graph's context.
* **Graphs without an abnormal node** contribute no contrastive term and their normal nodes do not
  count in the average (see :mod:`gcad_dist.model.loss`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor

from .aggregate import weighted_sum
from .ball import DEFAULT_FANOUT, ball_mean, ball_reveals_group, switch_phrase, switch_sample, two_hop_ball
from .ball import SCORE_SEED as BALL_SCORE_SEED
from .context import IDENTITY, ContextSync
from .degree_trend import neutral_to_degree
from .edge_update import EVAL_RULES
from .encoder import GCCADEncoder, check_edges_into, check_seed_mask
from .heads import ClassifierHead, EnsembleProjectionHead, ProjectionHead
from .loose_context import embedded_link_weights, larger_z
from .loss import ce_loss, contrastive_loss_from_cosines, link_loss, logistic_loss_from_cosines
from .node_update import CONVS, NORMS
from .readout import READOUTS, neighbour_context

log = logging.getLogger(__name__)

__all__ = ["GCCADConfig", "GCCADOutput", "GCCAD"]

LOSSES = ("contrastive", "ce", "logistic")
CONTRASTS = ("graph", "neighbors", "ego", "local")
SCORE_SPACES = ("encoder", "projection")
#: nodes per block of the local contrast's scoring (:meth:`GCCAD._local_score`): with the five-model ensemble the
#: projections and cosines of all nodes at once took about 4 GB per million nodes (session 53)
SCORE_ROWS = 1 << 17
#: at whole-graph scoring (eval mode) of the local contrast, keep the features (with a column of ones) in place of h^(0)
#: when they are narrower than h^(0), and project them a block of :data:`SCORE_ROWS` nodes at a time: the contexts
#: (the neighbours' mean, the two-hop ball's, the loose context's) are then averaged over the narrow rows, exact since
#: the projection is affine. The five-model ensemble's h^(0) is 320 wide against the 64 features of the generated
#: graphs: its rows and contexts of all nodes took 4-5 GB per million nodes (BENCHMARKS.md, session 55)
INPUT_SPACE_SCORING = True
JUMPS = ("last", "cat", "cat-local")


@dataclass
class GCCADConfig:
    """Settings of the GCCAD model (defaults follow METHOD.md)."""

    in_dim: int
    hidden: int = 64
    num_layers: int = 2
    conv: str = "gin"  # "gcn" | "gin" | "sage" | "gat"
    readout: str = "memory"  # "memory" | "mean" | "sum" | "max"
    edge_update: bool = True  # False: no link predictor / remover / residual (ablation)
    link_global: bool = True  # False: link predictor sees |h_i - h_j| only (ablation "no global info")
    loss: str = "contrastive"  # "contrastive" (METHOD.md) | "ce" (ablation: classifier head) | "logistic" (per node)
    link_loss_weight: float = 0.2  # 0 = ablation "no link-loss constraint"
    tau: float = 0.1
    gumbel_temperature: float = 0.6
    link_eval: str = "threshold"  # evaluation keep rule: "threshold" (p > 0.5, METHOD.md) | "expected" (I = p)
    dropout: float = 0.1
    # dropout on the input features x during training (0 = none, METHOD.md). gcad_dist.train's default is 0.2 below 20
    # labelled training anomalies per input feature: the models memorise few training anomalies within 20-30 epochs
    # (BENCHMARKS.md, sessions 28-29; gcad_dist.train.resolve_input_dropout)
    input_dropout: float = 0.0
    score_space: str = "encoder"  # "encoder" (METHOD section 3) | "projection" (reference code)
    contrast: str = "graph"  # "graph" (METHOD.md) | "neighbors" | "ego" | "local": what each node is contrasted with
    jump: str = "last"  # "last" (METHOD.md: h^(L), q^(L)) | "cat": every layer's h^(l) and q^(l), l = 0..L, concatenated
    # node-update normalisation: "layer" (LayerNorm per node) | "graph" (one RMS for all nodes: relative sizes kept)
    norm: str = "layer"
    # local contrast: K (input projection, projection head) pairs trained side by side, scores averaged (1 = one model)
    ensemble: int = 1
    # local contrast: the context is the neighbours (1) or the two-hop ball (2: the neighbours and up to
    # context_fanout sampled neighbours of each, the node itself excluded; gcad_dist.model.ball)
    context_hops: int = 1
    context_fanout: int = DEFAULT_FANOUT
    # local contrast: the score's trend over log(1 + in-degree) removed at scoring (gcad_dist.model.degree_trend),
    # so that a node is not judged by how many neighbours its context averages
    degree_detrend: bool = False
    # local contrast: each node also scored against its loose context (its neighbours weighted by (1 + common
    # neighbours)^-2), and the larger of the two robust z-scores kept (gcad_dist.model.loose_context)
    loose_context: bool = False
    # local contrast with context_hops 1: at scoring, the same model also scores with the two-hop ball, and the ball's
    # score is used when it makes a group of nodes stand out that the neighbours hide (gcad_dist.model.ball)
    ball_switch: bool = False
    # local contrast: at scoring, an isolation forest on the raw features is added to the score where it corroborates
    # the contrast's top nodes, or the distance to the 5th nearest node in feature space where the links say nothing
    # about the features (gcad_dist.feature_view; applied by gcad_dist.score, which holds the raw features)
    feature_view: bool = False
    # local contrast: at scoring, the score's top nodes are generalised by a cross-fitted linear classifier of their
    # features where it tells them apart (gcad_dist.signature_view; applied by gcad_dist.score)
    signature_view: bool = False

    def __post_init__(self) -> None:
        checks = [
            (self.conv in CONVS, f"conv must be one of {sorted(CONVS)}, got {self.conv!r}"),
            (self.readout in READOUTS, f"readout must be one of {READOUTS}, got {self.readout!r}"),
            (self.loss in LOSSES, f"loss must be one of {LOSSES}, got {self.loss!r}"),
            (self.jump in JUMPS, f"jump must be one of {JUMPS}, got {self.jump!r}"),
            (self.norm in NORMS, f"norm must be one of {NORMS}, got {self.norm!r}"),
            (self.jump == "last" or self.contrast == "graph", f"jump {self.jump!r} needs contrast 'graph'"),
            (self.contrast in CONTRASTS, f"contrast must be one of {CONTRASTS}, got {self.contrast!r}"),
            (self.score_space in SCORE_SPACES, f"score_space must be one of {SCORE_SPACES}"),
            (self.link_eval in EVAL_RULES, f"link_eval must be one of {EVAL_RULES}, got {self.link_eval!r}"),
            (self.in_dim >= 1 and self.hidden >= 1, "in_dim and hidden must be >= 1"),
            (self.ensemble >= 1, "ensemble must be >= 1"),
            (self.ensemble == 1 or not self.passes_messages,
             "ensemble > 1 needs the local contrast (and not the ce loss)"),
            (self.num_layers >= 1, "num_layers must be >= 1"),
            (self.context_hops in (1, 2), f"context_hops must be 1 or 2, got {self.context_hops}"),
            (self.context_hops == 1 or (self.contrast == "local" and not self.passes_messages),
             "context_hops 2 needs the local contrast (and not the ce loss)"),
            (self.context_fanout >= 1 or self.context_fanout == -1, "context_fanout must be >= 1 or -1 (all)"),
            (not self.loose_context or (self.contrast == "local" and not self.passes_messages
                                        and self.context_hops == 1),
             "loose_context needs the local contrast with context_hops 1 (and not the ce loss)"),
            (not self.ball_switch or (self.contrast == "local" and not self.passes_messages
                                      and self.context_hops == 1 and not self.loose_context),
             "ball_switch needs the local contrast with context_hops 1, without loose_context (and not the ce loss)"),
            (not self.feature_view or (self.contrast == "local" and not self.passes_messages),
             "feature_view needs the local contrast (and not the ce loss)"),
            (not self.signature_view or (self.contrast == "local" and not self.passes_messages),
             "signature_view needs the local contrast (and not the ce loss)"),
            (self.tau > 0 and self.gumbel_temperature > 0, "tau and gumbel_temperature must be > 0"),
            (0.0 <= self.dropout < 1.0, "dropout must be in [0, 1)"),
            (0.0 <= self.input_dropout < 1.0, "input_dropout must be in [0, 1)"),
            (self.link_loss_weight >= 0, "link_loss_weight must be >= 0"),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)

    @property
    def passes_messages(self) -> bool:
        """Whether the forward pass runs the GCCAD layers: the ``local`` contrast (not the CE ablation) skips them,
        and the model is then its input projection and head (the label-free recipe's)."""
        return not (self.contrast == "local" and self.loss != "ce")


@dataclass
class GCCADOutput:
    """What :meth:`GCCAD.forward` returns.

    h: [N, hidden] final node embeddings h^(L); q: [G, hidden] final contexts q^(L);
    batch: [N] graph id per node; edge_index: [2, E] the edges used (the input edges; removed edges
    carry weight 0); edge_probs / edge_logits: per layer [E] link probabilities p_ij and their
    logits (empty when edge_update=False); edge_weight: [E] final edge weights w^(L) or None;
    logits: [N, 2] classifier logits (CE ablation) or None; h0: [N, hidden] the input projection (local
    contrasts only, else None; None too at the local contrast's input-space scoring, which holds ``x_in`` instead);
    local_context: the ``local`` contrast's context rows (the mean of the neighbours'
    h0), when a hop-trimmed minibatch computed them with its seeds' outputs (else None: computed from h0).
    """

    h: Tensor
    q: Tensor
    batch: Tensor
    edge_index: Tensor
    edge_probs: list[Tensor] = field(default_factory=list)
    logits: Tensor | None = None
    edge_logits: list[Tensor] = field(default_factory=list)
    edge_weight: Tensor | None = None
    num_graphs: int = 1
    h0: Tensor | None = None
    local_context: Tensor | None = None
    # the two-hop ball's context rows when the ball switch scores with the neighbours as context (else None), computed
    # for the nodes ``ball_nodes`` only (None: all; a large graph's switch decides on a sample, ``switch_sample``),
    # and the input the ball is averaged over (the features, when narrower than h0; else None: h0)
    ball_context: Tensor | None = None
    ball_nodes: Tensor | None = None
    ball_input: Tensor | None = None
    # whole-graph scoring of the local contrast on features narrower than h0 (:data:`INPUT_SPACE_SCORING`): the
    # features with a column of ones, [N, F + 1], in place of h0 (then None; ``h`` is these rows too). h0 is their
    # projection (:meth:`GCCAD.lift`), and the context rows above are means of these rows, so that a node without
    # context (its ones column averages to 0) projects to 0, as the mean of no h0 rows is
    x_in: Tensor | None = None


class GCCAD(torch.nn.Module):
    """GCCAD encoder + projection head (+ classifier head for the CE ablation)."""

    def __init__(self, config: GCCADConfig) -> None:
        super().__init__()
        self.config = config
        self.encoder = GCCADEncoder(config)
        out_dim = config.hidden * (config.num_layers + 1 if config.jump != "last" else 1)
        if config.ensemble > 1:  # K input projections side by side (one Linear of K * hidden outputs), K heads
            self.encoder.input_proj = torch.nn.Linear(config.in_dim, config.hidden * config.ensemble)
            self.head = EnsembleProjectionHead(config.hidden, config.ensemble)
        else:
            self.head = ProjectionHead(config.hidden, out_dim)
        self.classifier = ClassifierHead(config.hidden, config.dropout, out_dim) if config.loss == "ce" else None

    def forward(
        self,
        x: Tensor,
        edge_index: Tensor,
        batch: Tensor | None = None,
        num_graphs: int | None = None,
        edge_weight: Tensor | None = None,
        context_mask: Tensor | None = None,
        sync: ContextSync | None = None,
        num_sampled_nodes: list[int] | None = None,
        num_sampled_edges: list[int] | None = None,
        member_swaps: tuple[Tensor, Tensor] | None = None,
        edge_scale: Tensor | None = None,
    ) -> GCCADOutput:
        """Encode a graph or a PyG batch of graphs.

        batch: graph id per node (``Batch.batch``) or None for one graph; pass ``num_graphs`` to
        avoid a device sync. context_mask: bool [N], the nodes whose embeddings enter the
        per-graph context sums (default: all). sync: how per-graph sums are combined (default:
        identity; see :mod:`gcad_dist.model.context`). num_sampled_nodes / num_sampled_edges: per-hop
        counts of a neighbour-sampled minibatch whose context and loss masks are its seeds: later
        layers then skip what cannot reach the seeds (:class:`GCCADEncoder`); ``out.h`` and
        ``out.batch`` then cover the first nodes only (the seeds among them). member_swaps: an ensemble's own
        feature swaps, (pick, donor) [K, m] (:func:`gcad_dist.data.online_corruption.draw_member_swaps`): member k
        sees ``x`` with rows ``pick[k]`` replaced by rows ``donor[k]``, without a [N, K, F] copy of ``x``.
        edge_scale: [E] factors on the messages of the sum aggregations, for a degree-capped edge sample
        (:class:`gcad_dist.data.degree_cap.DegreeCap`; see :meth:`GCCADEncoder.forward`).
        """
        if member_swaps is not None and not (self.config.contrast == "local" and self.config.ensemble > 1
                                             and x.dim() == 2):
            raise ValueError("member_swaps are an ensemble's (local contrast, ensemble > 1) swaps of a [N, F] input")
        sync = IDENTITY if sync is None else sync
        if self.training and self.config.input_dropout > 0:  # every feature of every node, before anything else
            x = F.dropout(x, self.config.input_dropout, training=True)
        n = x.size(0)
        if batch is None:
            batch = torch.zeros(n, dtype=torch.long, device=x.device)
            num_graphs = 1 if num_graphs is None else num_graphs
        elif num_graphs is None:
            num_graphs = int(batch.max().item()) + 1 if n > 0 else 1
        if not self.config.passes_messages:
            # neither side of the local contrast passes messages: the GCCAD layers are skipped (out.h = h^(0))
            if num_sampled_nodes is not None and num_sampled_edges is not None and len(num_sampled_edges) >= 1:
                return self._local_seeds(x, edge_index, batch, num_graphs, context_mask, num_sampled_nodes[0],
                                         list(num_sampled_edges), member_swaps)
            width = self.encoder.input_proj.out_features
            x_in = source = None
            if (INPUT_SPACE_SCORING and not self.training and member_swaps is None and x.dim() == 2
                    and x.size(1) + 1 < width):  # scoring in input space: [x, 1] stands in for h^(0)
                rows = x_in = torch.cat([x, x.new_ones(n, 1)], dim=1)
            else:
                rows = self.input_projection(x)
                if member_swaps is not None:  # the projection is row-wise: a swapped row's h^(0) is its donor's
                    pick, donor, col = self._swap_index(member_swaps)
                    v = rows.view(n, self.config.ensemble, -1)
                    rows = v.index_put((pick, col), v[donor, col]).reshape(rows.shape)
                # one input for every member: average the narrower features, then project (exact: affine)
                source = x if member_swaps is None and x.dim() == 2 and x.size(1) < width else None
            ctx = ball = nodes = None
            if self.config.context_hops == 2:  # the mean over each node's two-hop ball is the context
                ctx = self._ball_context(source, rows, edge_index, n)
            elif self.config.ball_switch and not self.training:  # the ball switch's other context, at scoring
                nodes = switch_sample(n, rows.device)
                ball = self._ball_context(source, rows, edge_index, n, nodes)
            return GCCADOutput(h=rows, q=rows.new_zeros(num_graphs, width), batch=batch, edge_index=edge_index,
                               num_graphs=num_graphs, h0=None if x_in is not None else rows, local_context=ctx,
                               ball_context=ball, ball_nodes=nodes, ball_input=source if ball is not None else None,
                               x_in=x_in)
        if self.config.contrast != "graph":  # the neighbours' final embeddings are needed: no hop trimming
            num_sampled_nodes = num_sampled_edges = None
        h, q, probs, logits, w, h0 = self.encoder(
            x, edge_index, batch, num_graphs, edge_weight=edge_weight, context_mask=context_mask, sync=sync,
            num_sampled_nodes=num_sampled_nodes, num_sampled_edges=num_sampled_edges, edge_scale=edge_scale,
        )
        cls = self.classifier(h) if self.classifier is not None else None
        return GCCADOutput(
            h=h, q=q, batch=batch[: h.size(0)], edge_index=edge_index, edge_probs=probs, logits=cls,
            edge_logits=logits, edge_weight=w, num_graphs=num_graphs,
            h0=h0 if self.config.contrast in ("ego", "local") or self.config.jump == "cat-local" else None,
        )

    def _swap_index(self, member_swaps: tuple[Tensor, Tensor]) -> tuple[Tensor, Tensor, Tensor]:
        """(pick, donor, member) flat [K * m] of an ensemble's swaps (pick, donor) [K, m]."""
        pick, donor = member_swaps
        k = self.config.ensemble
        if pick.dim() != 2 or pick.size(0) != k or donor.shape != pick.shape:
            raise ValueError(f"member_swaps must be two [{k}, m] tensors (pick, donor), got {tuple(pick.shape)} and "
                             f"{tuple(donor.shape)}")
        col = torch.arange(k, device=pick.device).repeat_interleave(pick.size(1))
        return pick.reshape(-1), donor.reshape(-1), col

    def _local_seeds(self, x: Tensor, edge_index: Tensor, batch: Tensor, num_graphs: int,
                     context_mask: Tensor | None, seeds: int, hop_edges: list[int],
                     member_swaps: tuple[Tensor, Tensor] | None = None) -> GCCADOutput:
        """The local contrast on a neighbour-sampled minibatch (nodes and edges ordered by hop): outputs for its
        ``seeds`` first rows only. A seed's context is the mean of its neighbours' h^(0) = W (mean of their x) + b,
        so the features are averaged over the hop-1 edges first and the projection runs on 2 x seeds rows instead
        of every sampled node (PyG's SAGEConv order: aggregate, then transform). An ensemble's swaps (of seeds)
        replace the swapped seeds' rows and add, to the contexts of the seeds they neighbour, their change
        (donor's projection minus own) over the degree. Same outputs, loss and gradients as the whole minibatch's,
        up to rounding. With ``context_hops`` 2 the context edges are the seeds' two-hop balls, composed from the
        minibatch's first two hops (:func:`gcad_dist.model.ball.two_hop_ball`)."""
        check_seed_mask(context_mask, seeds)
        ei = edge_index[:, :hop_edges[0]]
        check_edges_into(ei, seeds, "hop 1")
        if self.config.context_hops == 2:
            if len(hop_edges) < 2:
                raise ValueError("context_hops 2 needs a minibatch sampled two hops deep (num_sampled_edges of 2 hops)")
            ei = two_hop_ball(ei, edge_index[:, :hop_edges[0] + hop_edges[1]], x.size(0))
        deg = torch.bincount(ei[1], minlength=seeds)[:seeds]
        flat = x.reshape(x.size(0), -1)  # [N, F] or [N, K * F] (an ensemble's own inputs)
        mean = weighted_sum(flat, ei, None, seeds) / deg.clamp_min(1).to(flat.dtype).unsqueeze(-1)
        h0 = self.input_projection(x[:seeds])
        ctx = self.input_projection(mean.view((seeds,) + tuple(x.shape[1:])))
        ctx = ctx * (deg > 0).to(ctx.dtype).unsqueeze(-1)  # no neighbour: context 0, as neighbour_context gives
        if member_swaps is not None:
            pick, donor, col = self._swap_index(member_swaps)
            if pick.numel() and int(pick.max()) >= seeds:
                raise ValueError("member_swaps of a hop-trimmed minibatch must pick seeds (the first "
                                 "num_sampled_nodes[0] nodes)")
            k = self.config.ensemble
            own = h0.view(seeds, k, -1)
            # member k's donors through member k's projection only: [m, K, F] rows, back to the flat (k, j) order
            moved = self.input_projection(x[member_swaps[1]].transpose(0, 1))
            moved = moved.view(-1, k, own.size(-1)).transpose(0, 1).reshape(-1, own.size(-1))
            h0 = own.index_put((pick, col), moved).reshape(h0.shape)
            # contexts: a seed's neighbour that is a swapped seed brings (donor's h^(0) - its own) / degree
            pos = torch.full((k, seeds), -1, dtype=torch.long, device=pick.device)
            pos[col, pick] = torch.arange(col.numel(), device=pick.device)
            src, dst = ei[0], ei[1]
            near = (src < seeds).nonzero().squeeze(1)
            hit = pos[:, src[near]]  # [K, E']: the swap of each member at each edge's source, or -1
            km, e = (hit >= 0).nonzero(as_tuple=True)
            if km.numel():
                j, i, f = src[near[e]], dst[near[e]], hit[km, e]
                delta = (moved[f] - own[j, km]) / deg[i].to(moved.dtype).unsqueeze(-1)
                c = ctx.view(seeds, k, -1)
                ctx = c.index_put((i, km), delta, accumulate=True).reshape(ctx.shape)
        return GCCADOutput(h=h0, q=h0.new_zeros(num_graphs, h0.size(1)), batch=batch[:seeds], edge_index=ei,
                           num_graphs=num_graphs, h0=h0, local_context=ctx)

    def input_projection(self, x: Tensor) -> Tensor:
        """h^(0) = the input projection of ``x`` [N, F]; for an ensemble, ``x`` may also be [N, K, F], member k's own
        input (its own corruption draw), each member projecting its own rows: [N, K * hidden] either way."""
        proj = self.encoder.input_proj
        if x.dim() == 2:
            return proj(x)
        k = self.config.ensemble
        if x.dim() != 3 or x.size(1) != k:
            raise ValueError(f"x must be [N, F] or [N, {k}, F] (one input per ensemble member), got {tuple(x.shape)}")
        w = proj.weight.view(k, self.config.hidden, -1)  # [K, h, F]
        h0 = torch.baddbmm(proj.bias.view(k, 1, -1), x.transpose(0, 1), w.transpose(1, 2))  # [K, N, h]
        return h0.transpose(0, 1).reshape(x.size(0), -1)

    @staticmethod
    def _rows(out: GCCADOutput) -> Tensor:
        """The rows the local contrast's contexts average: h^(0), or the features with a column of ones where
        ``out`` holds those instead (``out.x_in``)."""
        return out.h0 if out.h0 is not None or out.x_in is None else out.x_in

    def lift(self, rows: Tensor, out: GCCADOutput) -> Tensor:
        """``rows`` of ``out``'s :meth:`_rows` space (a node's own row, or a mean of rows) in h^(0) space: as they are,
        or, where ``out`` holds features with a column of ones, ``W f + b c`` for a row ``[f, c]``: a node's own
        row (c = 1) gets its h^(0), a mean over a context gets the mean of its h^(0) rows, an empty one (c = 0) 0."""
        if out.h0 is not None or out.x_in is None:
            return rows
        proj = self.encoder.input_proj
        return torch.addcmul(F.linear(rows[:, :-1], proj.weight), rows[:, -1:], proj.bias)

    def local_pair(self, out: GCCADOutput, idx: Tensor | None = None, project: bool = True,
                   context: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """(self, context) rows of the local contrasts for nodes ``idx`` (default all): the node's h^(L)
        (``neighbors``) or h^(0) (``ego``, ``local``) and the mean of its neighbours' h^(L) (h^(0) for
        ``local``; ``context``, rows of every node in :meth:`_rows`'s space, replaces it), through the projection head
        if ``project``."""
        own, ctx = self._local_rows(out, idx, context)
        own, ctx = self.lift(own, out), self.lift(ctx, out)
        if project:
            own, ctx = self.head(own), self.head(ctx)
        return own, ctx

    def _local_rows(self, out: GCCADOutput, idx: Tensor | None = None,
                    context: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """:meth:`local_pair`'s (self, context) rows before :meth:`lift` and the head: in :meth:`_rows`'s space for
        the ``local`` contrast (``context`` in that space too)."""
        contrast = self.config.contrast
        if contrast == "local":
            rows = self._rows(out)
            assert rows is not None
            ctx = out.local_context if context is None else context
            if ctx is None:
                ctx = neighbour_context(rows, out.edge_index, rows.size(0))
        else:
            ctx = neighbour_context(out.h, out.edge_index, out.h.size(0))
        own = self._rows(out) if contrast in ("ego", "local") else out.h
        if idx is not None:
            own, ctx = own.index_select(0, idx), ctx.index_select(0, idx)
        return own, ctx

    def loss(
        self, out: GCCADOutput, y: Tensor, mask: Tensor | None = None, sync: ContextSync | None = None
    ) -> dict[str, Tensor]:
        """Training loss: ``{"total", "con", "link"}`` with total = con + link_loss_weight * link.

        y: [N] 0/1 labels (1 = anomaly); mask: bool [N], the nodes whose labels are used (default
        all). For the CE ablation "con" is the cross-entropy term (also returned as "ce").
        """
        sync = IDENTITY if sync is None else sync
        cfg = self.config
        y = y.long()
        if mask is None:
            mask = torch.ones(y.size(0), dtype=torch.bool, device=y.device)
        y_all, mask_all = y, mask  # the link loss sees every edge's endpoints
        n_out = out.h.size(0)
        if n_out < y.size(0):  # trimmed minibatch: only the first nodes have outputs (the seeds among them)
            y, mask = y[:n_out], mask[:n_out]
        if cfg.loss == "ce":
            assert out.logits is not None, "CE ablation needs the classifier logits"
            con = ce_loss(out.logits, y, mask)
        elif cfg.contrast != "graph":
            idx = mask.nonzero().squeeze(1)
            own, ctx = self.local_pair(out, idx)
            cos = F.cosine_similarity(own.float(), ctx.float(), dim=-1)  # [n] (or [n, K]: an ensemble's members)
            yi, bi = y.index_select(0, idx), out.batch.index_select(0, idx)
            if cos.dim() == 2:  # the members' losses are averaged (logistic: a mean over nodes and members)
                k = cos.size(1)  # y: [N] (the same labels for every member) or [N, K] (each member's own draw)
                yi = yi.reshape(-1) if yi.dim() == 2 else yi.repeat_interleave(k)
                cos, bi = cos.reshape(-1), bi.repeat_interleave(k)
            con = self._con(cos, yi, bi, out.num_graphs, sync)
        else:
            # only the labelled nodes enter the loss: project just those (a neighbour-sampled
            # minibatch labels its ~1k seeds out of ~20k sampled nodes)
            idx = mask.nonzero().squeeze(1)
            z = F.normalize(self.head(out.h.index_select(0, idx)), dim=-1)
            c = F.normalize(self.head(self.graph_context(out, idx)), dim=-1)
            cos = (z.float() * c.float()).sum(-1)
            con = self._con(cos, y.index_select(0, idx), out.batch.index_select(0, idx), out.num_graphs, sync)
        if cfg.link_loss_weight > 0 and out.edge_logits:
            link = link_loss(out.edge_logits, out.edge_index, y_all, mask_all)
        else:
            link = con.new_zeros(())
        result = {"total": con + cfg.link_loss_weight * link, "con": con, "link": link}
        if cfg.loss == "ce":
            result["ce"] = con
        return result

    def graph_context(self, out: GCCADOutput, idx: Tensor | None = None) -> Tensor:
        """Each node's context row for the graph contrast (nodes ``idx``, default all output rows): its graph's q;
        with ``jump="cat-local"`` the first block, q^(0), is the mean of the node's neighbours' h^(0) instead."""
        b = out.batch if idx is None else out.batch.index_select(0, idx)
        c = out.q.index_select(0, b)
        if self.config.jump == "cat-local":
            assert out.h0 is not None
            local = neighbour_context(out.h0, out.edge_index, out.h0.size(0))[: out.h.size(0)]
            if idx is not None:
                local = local.index_select(0, idx)
            c = torch.cat([local.to(c.dtype), c[:, self.config.hidden:]], dim=-1)
        return c

    def _local_score(self, out: GCCADOutput, context: Tensor | None = None, idx: Tensor | None = None) -> Tensor:
        """1 - cos(self, context) of every node (of nodes ``idx``) of a non-graph contrast (an ensemble: the mean over
        its members); ``context`` replaces the local contrast's (see :meth:`local_pair`). The projection and the
        cosine run over blocks of :data:`SCORE_ROWS` nodes, so that only the rows and contexts of all nodes are held
        at once, not their projections and temporaries (a row's score does not depend on the block)."""
        project = self.config.contrast in ("ego", "local") or self.config.score_space == "projection"
        own, ctx = self._local_rows(out, idx, context)
        parts = []
        for lo in range(0, own.size(0), SCORE_ROWS):
            o, c = self.lift(own[lo:lo + SCORE_ROWS], out), self.lift(ctx[lo:lo + SCORE_ROWS], out)
            if project:
                o, c = self.head(o), self.head(c)
            elif self.config.ensemble > 1:  # per member: block k of h^(0) and of its context
                o = o.reshape(o.size(0), self.config.ensemble, -1)
                c = c.reshape(c.size(0), self.config.ensemble, -1)
            s = 1.0 - F.cosine_similarity(o.float(), c.float(), dim=-1)
            parts.append(s.mean(-1) if s.dim() == 2 else s)  # an ensemble: the mean of its members' scores
        return torch.cat(parts) if parts else own.new_zeros(0, dtype=torch.float32)

    def _ball_context(self, source: Tensor | None, h0: Tensor, edge_index: Tensor, n: int,
                      targets: Tensor | None = None, scoring: bool = False) -> Tensor:
        """The mean of h0 over each node's two-hop ball (of ``targets`` only, other rows 0), a fresh sample of the
        second hop in training and a fixed one when scoring (eval mode or ``scoring``); from ``source`` (narrower
        features) averaged, then projected, when given."""
        gen = None if self.training and not scoring else torch.Generator().manual_seed(BALL_SCORE_SEED)
        fan = self.config.context_fanout
        if source is not None:
            mean, size = ball_mean(source, edge_index, n, fan, gen, targets=targets)
            return self.input_projection(mean) * (size > 0).to(h0.dtype).unsqueeze(-1)
        return ball_mean(h0, edge_index, n, fan, gen, targets=targets)[0]

    def _switch_to_ball(self, out: GCCADOutput, plain: Tensor) -> Tensor:
        """``ball_switch``: the score with the two-hop ball as context (the same model; a fixed sample of the second
        hop, which forward computes at scoring as ``out.ball_context``) when
        :func:`gcad_dist.model.ball.ball_reveals_group` says so, else ``plain``. The choice is kept in
        ``self.last_context`` ("neighbours" or "ball", with both shares of nodes that stand out) and counted over
        calls in ``self.context_choices`` (a part-by-part scoring calls once a part). On a graph of more than
        :data:`gcad_dist.model.ball.SWITCH_SAMPLE` nodes the shares are those of a fixed sample of them, and every
        node's ball is computed only when the ball is chosen."""
        rows = self._rows(out)
        n, detrend = rows.size(0), self.config.degree_detrend
        ctx, nodes = out.ball_context, out.ball_nodes
        if ctx is None:  # an output not made by forward's whole-graph path: the ball from h^(0) (same rows)
            nodes = switch_sample(n, rows.device)
            ctx = self._ball_context(None, rows, out.edge_index, n, nodes, scoring=True)
        deg = torch.bincount(out.edge_index[1], minlength=n)[: plain.size(0)]
        if nodes is None:
            ball = self._neutral_to_degree(self._local_score(out, ctx), out, detrend)
            use, t1, t2 = ball_reveals_group(plain, ball, deg > 0)
        else:  # decided on a sample of a large graph; every node's ball only if the ball is chosen
            nodes = nodes[nodes < plain.size(0)]
            sample = neutral_to_degree(self._local_score(out, ctx, nodes), deg[nodes], detrend)
            use, t1, t2 = ball_reveals_group(plain[nodes], sample, deg[nodes] > 0)
            if use:
                ctx = self._ball_context(out.ball_input, rows, out.edge_index, n, scoring=True)
                ball = self._neutral_to_degree(self._local_score(out, ctx), out, detrend)
        choice = "ball" if use else "neighbours"
        self.last_context = {"context": choice, "stand_out_neighbours": t1, "stand_out_ball": t2}
        counts = getattr(self, "context_choices", None) or {"ball": 0, "neighbours": 0}
        counts[choice] += 1  # over every graph or part scored (gcad_dist.score reports them once)
        self.context_choices = counts
        log.debug("ball switch: %s", switch_phrase(use, t1, t2))
        return ball if use else plain

    @staticmethod
    def _neutral_to_degree(s: Tensor, out: GCCADOutput, detrend: bool) -> Tensor:
        """The local score made neutral to degree (:func:`gcad_dist.model.degree_trend.neutral_to_degree`): with
        ``detrend`` its trend over log(1 + in-degree) removed, then a node without neighbours set to the median of
        the other nodes' scores.

        Its context (the mean of no neighbours) is empty, so the contrast says nothing about it; left as it is,
        1 - cos(g(h0_i), g(0)) depends on the head's bias alone, and on graphs with 10% of their nodes cut off it
        put those nodes in 90-99% of the top 5% on two of them (BENCHMARKS.md, session 21). Exact for a whole-graph
        forward; a minibatch or part uses its own nodes' degrees, trend and median."""
        deg = torch.bincount(out.edge_index[1], minlength=GCCAD._rows(out).size(0))[: s.size(0)]
        return neutral_to_degree(s, deg, detrend)

    def _con(self, cos: Tensor, y: Tensor, batch: Tensor, num_graphs: int, sync: ContextSync) -> Tensor:
        """The contrastive term from each labelled node's cosine with its context (``loss`` picks the form)."""
        if self.config.loss == "logistic":
            return logistic_loss_from_cosines(cos, y, self.config.tau)
        return contrastive_loss_from_cosines(cos, y, batch, num_graphs, torch.ones_like(y, dtype=torch.bool),
                                             self.config.tau, sync)

    def score(self, out: GCCADOutput) -> Tensor:
        """[N] anomaly score, higher = more anomalous: 1 - cos(h_i, q_g) (or P(anomaly) for CE)."""
        if self.config.loss == "ce":
            assert out.logits is not None
            return torch.softmax(out.logits.float(), dim=-1)[:, 1]
        if self.config.contrast != "graph":
            s = self._local_score(out)
            if self.config.contrast != "local":
                return s
            s = self._neutral_to_degree(s, out, self.config.degree_detrend)
            if self.config.loose_context:  # the larger of the plain and the loose context's robust z-scores
                rows = self._rows(out)
                n = rows.size(0)
                weights = embedded_link_weights(out.edge_index, n)
                loose = self._neutral_to_degree(
                    self._local_score(out, neighbour_context(rows, out.edge_index, n, weights)), out,
                    self.config.degree_detrend)
                has = torch.bincount(out.edge_index[1], minlength=n)[: s.size(0)] > 0
                s = larger_z(s, loose, has)
            elif self.config.ball_switch:
                s = self._switch_to_ball(out, s)
            return s
        h, c = out.h, self.graph_context(out)
        if self.config.score_space == "projection":
            h, c = self.head(h), self.head(c)
        return 1.0 - F.cosine_similarity(h.float(), c.float(), dim=-1)
