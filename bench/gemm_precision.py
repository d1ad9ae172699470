"""The link MLP's matrix products in fp32 and in bf16, at a graph's edge count: what bf16 products would save.

Example (BENCHMARKS.md, session 37; tolokers has 1,038,000 directed edges):
    python -m bench.gemm_precision --edges 1038000 --threads 1

The native link MLP (``gcad_dist/model/csrc/edge_kernels.cpp``) computes, per block of ``--chunk`` edges and per
layer, one product ``[chunk, h] x [h, h]`` in the forward pass (z = |h_i - h_j| W1^T) and two in the backward pass
(dW1 += G^T A, dA = G W1), in fp32 through BLAS. This times the same shapes over all the edges, one pass each, in
fp32 and in bf16 (torch's CPU kernels: oneDNN, AVX512-BF16 where the CPU has it), the bf16 figures both with the
inputs already in bf16 and with the fp32 -> bf16 -> fp32 conversions counted. It prints one row per product and
the ratios to fp32 measured in the same run (median of ``--repeats`` passes, the variants alternated).
"""

from __future__ import annotations

import logging
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script or with -m from the repo

from gcad_dist.cli import ArgumentParser, UsageError, run_cli, setup_logging  # noqa: E402

log = logging.getLogger("bench.gemm_precision")


@dataclass
class GemmPrecisionConfig:
    """Settings of ``python -m bench.gemm_precision``."""

    edges: int = 1_038_000
    hidden: int = 64
    chunk: int = 32_768
    threads: int = 1
    repeats: int = 5
    seed: int = 0


def _passes(cfg: GemmPrecisionConfig) -> dict[str, dict[str, Callable[[], None]]]:
    """{product: {variant: one pass over all the edges' blocks}}."""
    import torch

    g = torch.Generator().manual_seed(cfg.seed)
    a = torch.randn(cfg.chunk, cfg.hidden, generator=g)
    d = torch.randn(cfg.chunk, cfg.hidden, generator=g)  # the backward's incoming gradient of z
    w = torch.randn(cfg.hidden, cfg.hidden, generator=g)
    wt = w.t().contiguous()  # W1^T as the kernels hold it: the forward's right operand, contiguous
    ab, db, wb, wtb = a.bfloat16(), d.bfloat16(), w.bfloat16(), wt.bfloat16()
    blocks = [min(cfg.chunk, cfg.edges - lo) for lo in range(0, cfg.edges, cfg.chunk)]

    def each(fn: Callable[[int], object]) -> Callable[[], None]:
        return lambda: [fn(rows) for rows in blocks] and None

    return {
        "forward z = A W1^T": {
            "fp32": each(lambda r: a[:r] @ wt),
            "bf16": each(lambda r: ab[:r] @ wtb),
            "bf16 + conversions": each(lambda r: (a[:r].bfloat16() @ wtb).float()),
        },
        "backward dW1 = G^T A": {
            "fp32": each(lambda r: d[:r].t() @ a[:r]),
            "bf16": each(lambda r: db[:r].t() @ ab[:r]),
            "bf16 + conversions": each(lambda r: (d[:r].bfloat16().t() @ a[:r].bfloat16()).float()),
        },
        "backward dA = G W1": {
            "fp32": each(lambda r: d[:r] @ w),
            "bf16": each(lambda r: db[:r] @ wb),
            "bf16 + conversions": each(lambda r: (d[:r].bfloat16() @ wb).float()),
        },
    }


def measure(cfg: GemmPrecisionConfig) -> dict[str, dict[str, float]]:
    """{product: {variant: median seconds of one pass over all the edges}}, variants alternated."""
    import torch

    from gcad_dist.allocator import retain_freed_memory

    retain_freed_memory()  # as training does: freed blocks are reused, not returned to the OS and faulted in again
    torch.set_num_threads(cfg.threads)
    out: dict[str, dict[str, float]] = {}
    for product, variants in _passes(cfg).items():
        times: dict[str, list[float]] = {v: [] for v in variants}
        for fn in variants.values():
            fn()  # warm-up
        for _ in range(cfg.repeats):
            for v, fn in variants.items():
                t0 = time.perf_counter()
                fn()
                times[v].append(time.perf_counter() - t0)
        out[product] = {v: statistics.median(t) for v, t in times.items()}
    return out


def table(res: dict[str, dict[str, float]], cfg: GemmPrecisionConfig) -> str:
    """Markdown: seconds per pass and the ratio fp32 / variant, one row per product, then the three summed."""
    variants = list(next(iter(res.values())))
    lines = [f"{cfg.edges:,} edges, h = {cfg.hidden}, blocks of {cfg.chunk:,}, {cfg.threads} thread(s), median of "
             f"{cfg.repeats}", "",
             "| product | " + " | ".join(f"{v} s" for v in variants) + " | " +
             " | ".join(f"fp32 / {v}" for v in variants[1:]) + " |",
             "|---|" + "---|" * (2 * len(variants) - 1)]
    rows = list(res.items()) + [("all three (a layer's forward and backward)",
                                 {v: sum(r[v] for r in res.values()) for v in variants})]
    for product, r in rows:
        lines.append(f"| {product} | " + " | ".join(f"{r[v]:.4f}" for v in variants) + " | " +
                     " | ".join(f"{r['fp32'] / r[v]:.2f}x" for v in variants[1:]) + " |")
    return "\n".join(lines)


def build_parser() -> ArgumentParser:
    d = GemmPrecisionConfig()
    p = ArgumentParser(prog="python -m bench.gemm_precision", description=__doc__.split("\n\n")[0])
    p.add_argument("--edges", type=int, default=d.edges, help=f"edges of the graph (default {d.edges:,}: tolokers)")
    p.add_argument("--hidden", type=int, default=d.hidden, help=f"hidden width h (default {d.hidden})")
    p.add_argument("--chunk", type=int, default=d.chunk, help=f"edges per block (default {d.chunk:,}, the native "
                   "kernels' EDGE_CHUNK)")
    p.add_argument("--threads", type=int, default=d.threads, help=f"torch threads (default {d.threads})")
    p.add_argument("--repeats", type=int, default=d.repeats, help=f"timed passes per variant (default {d.repeats})")
    p.add_argument("--seed", type=int, default=d.seed, help=f"seed of the random inputs (default {d.seed})")
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    return p


def main(argv: list[str] | None = None) -> int:
    args = vars(build_parser().parse_args(argv))
    verbose = args.pop("verbose")
    cfg = GemmPrecisionConfig(**args)
    for name in ("edges", "hidden", "chunk", "threads", "repeats"):
        if getattr(cfg, name) < 1:
            raise UsageError(f"--{name}: must be >= 1, got {getattr(cfg, name)}")
    setup_logging(verbose)
    print(table(measure(cfg), cfg))
    return 0


if __name__ == "__main__":
    run_cli(main)
