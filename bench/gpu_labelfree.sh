#!/usr/bin/env bash
# The label-free default (build --k 1, pretrain, score) end to end on a GPU, on a generated graph of 5M nodes, scored
# on the GPU and on the host's CPU threads from the same checkpoint. Session 53 ran it to explain why 5M scored 0.028
# below 1M and 3M; session 54 answered that on a CPU (BENCHMARKS.md: the generator's 47 communities at 5M and the
# pre-training's length, not the GPU nor the size). What it still measures on a GPU host: that the two devices agree at
# 5M (session 53 checked 1M only) and the scoring time since session 53's changes (blocks, threads), untimed on a GPU.
# One call of an offline GPU host (no package registry), as bench/gpu_offline.sh:
#
#   GCAD_SITE=.whl/site312.tar.xz bash bench/gpu_labelfree.sh
#
# GCAD_SITE: a .tar.xz of a site folder `site312/` with the packages the host's image lacks (ray[default,train],
# zarr, numcodecs, faiss-cpu and their closure; BENCHMARKS.md, session 27, says how), unpacked to /tmp and put on
# PYTHONPATH. Stages, each under a time limit: the native CPU kernels built once; `python -m bench.labelfree_scale` at
# 5M nodes, pre-trained on the GPU, the checkpoint scored on the GPU and on the host's CPU threads (AUROC per planted
# kind each); since session 58 `python -m bench.dense_ball --device cuda` (the dense graph's two-hop ball, both
# paths). The GPU tests run first. About 8 minutes on an H200 host with 16 cores, inside one 10-minute device call
# (each stage's limit adds up to under 600 s with the setup).
# (Session 53 ran the first version of this script, commit 342b031: 1M scored on both devices, then 5M on the GPU.
# Session 71 ran its stages inline, the 5M stage under 390 s and the dense ball under 50 s, in 471 s: BENCHMARKS.md.)
# The baselines are left out: the generator is deterministic across machines, and BENCHMARKS.md has them per size.
# JSON and logs go to $OUT (default /tmp/out).
set -uo pipefail
THREADS=${GCAD_THREADS:-$(nproc)}
source "$(dirname "$0")/gpu_site.sh" || exit 1
echo "threads used: $THREADS"

stage "pytest: GPU-touching tests"
timeout 80 python3 -m pytest -q -p no:cacheprovider tests/test_sharding.py tests/test_sampler.py tests/test_kmeans_torch.py \
  tests/test_degree_cap.py tests/test_context_ball.py \
  -k "cuda or gpu or side_stream or backend" 2>&1 | tail -4

timeout 30 python3 -c "from gcad_dist.model import native; print('native kernels:', native.status())" 2>&1 | tail -1

stage "label-free default at 5M nodes: pre-trained on the GPU, scored on the GPU and on the CPU"
timeout 390 python3 -m bench.labelfree_scale --nodes 5000000 --device cuda --also-score-on cpu --threads "$THREADS" \
  --stage-timeout 200 --baselines --out /tmp/lf5 2>&1 | tee "$OUT/bench_5m.log" | grep -vE "^\s*$" \
  | grep -E "bench.labelfree_scale|^\|" | tail -20
cp /tmp/lf5/labelfree_scale.json "$OUT/labelfree_5m.json" 2>/dev/null
tail -n 25 /tmp/lf5/n5000000/score_cuda.log > "$OUT/score_5m_cuda.log" 2>/dev/null
tail -n 25 /tmp/lf5/n5000000/score_cpu.log > "$OUT/score_5m_cpu.log" 2>/dev/null
tail -n 25 /tmp/lf5/n5000000/pretrain.log > "$OUT/pretrain_5m.log" 2>/dev/null

stage "the two-hop ball of a dense graph on the GPU: sorted-unique against the membership matrix (session 58)"
timeout 50 python3 -m bench.dense_ball --device cuda 2>&1 | grep -E "^\|" | tee "$OUT/dense_ball_cuda.md"

stage done
