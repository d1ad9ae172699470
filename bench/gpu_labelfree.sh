#!/usr/bin/env bash
# The label-free default (build --k 1, pretrain, score) end to end on a GPU, on generated graphs of 1M and 5M nodes,
# against IsolationForest and neighbour cosine on the same graphs: BENCHMARKS.md, session 53. One call of an offline
# GPU host (no package registry), as bench/gpu_offline.sh:
#
#   GCAD_SITE=.whl/site312.tar.xz bash bench/gpu_labelfree.sh
#
# GCAD_SITE: a .tar.xz of a site folder `site312/` with the packages the host's image lacks (ray[default,train],
# zarr, numcodecs, faiss-cpu and their closure; BENCHMARKS.md, session 27, says how), unpacked to /tmp and put on
# PYTHONPATH. Stages, each under a time limit: the native CPU kernels built once; `python -m bench.labelfree_scale`
# at 1M nodes (scored on the GPU and, from the same checkpoint, on the CPU: the same-run baseline) and at 5M nodes
# (GPU only); the GPU tests last. About 7 minutes on an H200 host with 16 cores.
# JSON and logs go to $OUT (default /tmp/out).
set -uo pipefail
SITE=${GCAD_SITE:-.whl/site312.tar.xz}
THREADS=${GCAD_THREADS:-$(nproc)}
export PYTHONUNBUFFERED=1 OMP_WAIT_POLICY=PASSIVE
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
T0=$(date +%s)
stage() { echo; echo "=== [$(( $(date +%s) - T0 ))s] $*"; }
stage setup
[ -d /tmp/site312 ] || tar -C /tmp -xJf "$SITE" || exit 1
export PYTHONPATH=/tmp/site312:$PWD
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 -c "import torch, ray, zarr, faiss, sklearn, torch_geometric as g; print('torch', torch.__version__, 'ray', ray.__version__, 'zarr', zarr.__version__, 'faiss', faiss.__version__, 'sklearn', sklearn.__version__, 'pyg', g.__version__, 'cuda', torch.cuda.is_available())"
echo "cores: $(nproc), threads used: $THREADS"
timeout 60 python3 -c "from gcad_dist.model import native; print('native kernels:', native.status())" 2>&1 | tail -1

stage "label-free default at 1M nodes: GPU, and the same checkpoint scored on the CPU"
timeout 200 python3 -m bench.labelfree_scale --nodes 1000000 --device cuda --also-score-on cpu --threads "$THREADS" \
  --stage-timeout 100 --out /tmp/lf 2>&1 | tee "$OUT/bench_1m.log" | grep -vE "^\s*$" | grep -E "bench.labelfree_scale|^\|" | tail -20
cp /tmp/lf/labelfree_scale.json "$OUT/labelfree_1m.json" 2>/dev/null
tail -n 25 /tmp/lf/n1000000/score_cuda.log > "$OUT/score_1m_cuda.log" 2>/dev/null
tail -n 25 /tmp/lf/n1000000/pretrain.log > "$OUT/pretrain_1m.log" 2>/dev/null

stage "label-free default at 5M nodes: GPU"
timeout 250 python3 -m bench.labelfree_scale --nodes 5000000 --device cuda --threads "$THREADS" \
  --stage-timeout 120 --out /tmp/lf5 2>&1 | tee "$OUT/bench_5m.log" | grep -vE "^\s*$" | grep -E "bench.labelfree_scale|^\|" | tail -20
cp /tmp/lf5/labelfree_scale.json "$OUT/labelfree_5m.json" 2>/dev/null
tail -n 25 /tmp/lf5/n5000000/score_cuda.log > "$OUT/score_5m_cuda.log" 2>/dev/null
tail -n 25 /tmp/lf5/n5000000/pretrain.log > "$OUT/pretrain_5m.log" 2>/dev/null
stage "pytest: GPU-touching tests"
timeout 50 python3 -m pytest -q -p no:cacheprovider tests/test_sharding.py tests/test_sampler.py tests/test_kmeans_torch.py \
  -k "cuda or gpu or side_stream or backend" 2>&1 | tail -4

stage done
