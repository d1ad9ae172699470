#!/usr/bin/env bash
# GPU figures on an offline GPU host (no package registry), in one call: BENCHMARKS.md, session 27.
#
#   GCAD_SITE=.devenv/site312.tar.xz GCAD_DATA=.devenv/data bash bench/gpu_offline.sh
#
# GCAD_SITE: a .tar.xz of a site folder `site312/` holding the packages the host lacks (made on a machine with a
# registry; BENCHMARKS.md, session 27, says how), unpacked to /tmp and put on PYTHONPATH. GCAD_DATA: a folder with
# tolokers.npz (the full-batch run). Stages, each under `timeout`: the GPU tests, a generated 1M-node store (K=4),
# bench.gpu (step, sampler, kmeans), the NCCL epoch with the sampler's side stream off and on (alternated), at 64k
# seeds, bench.gpu_step with a profile, and a default `gcad_dist.train` run on tolokers on the GPU. JSON and the
# log go to $OUT (default /tmp/out).
set -uo pipefail
SITE=${GCAD_SITE:-.devenv/site312.tar.xz}
DATA=${GCAD_DATA:-.devenv/data}
export PYTHONUNBUFFERED=1 OMP_WAIT_POLICY=PASSIVE
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
T0=$(date +%s)
stage() { echo; echo "=== [$(( $(date +%s) - T0 ))s] $*"; }
stage setup
[ -d /tmp/site312 ] || tar -C /tmp -xJf "$SITE" || exit 1
export PYTHONPATH=/tmp/site312:$PWD
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 -c "import torch, ray, zarr, faiss, torch_geometric as g; print('torch', torch.__version__, 'ray', ray.__version__, 'zarr', zarr.__version__, 'faiss', faiss.__version__, 'pyg', g.__version__, 'cuda', torch.cuda.is_available())"
nproc

stage "pytest: GPU-touching files"
timeout 90 python3 -m pytest -q -p no:cacheprovider tests/test_sharding.py tests/test_sampler.py tests/test_kmeans_torch.py \
  -k "cuda or gpu or side_stream or backend" 2>&1 | tail -12

stage "store: generated 1M nodes, K=4"
timeout 60 python3 -m partitioning.synthetic --out /tmp/g1m.npz --nodes 1000000 --seed 0 2>&1 | tail -2
timeout 90 python3 -m partitioning.build --graph /tmp/g1m.npz --out /tmp/s1m.zarr --k 4 --no-plot --no-progress --threads 16 2>&1 | tail -3
S=/tmp/s1m.zarr

stage "bench.gpu: step, sampler, kmeans"
timeout 150 python3 -m bench.gpu --sections step sampler kmeans --store $S --threads 16 --json $OUT/gpu_main.json 2>&1 | grep -v "^\s*$" | tail -40

stage "bench.gpu ddp: side stream off/on, 16384 seeds, 60 steps, alternated"
for side in 0 1 0 1; do
  GCAD_SIDE_STREAM=$side timeout 80 python3 -m bench.gpu --sections ddp --ddp-runs gpu --store $S --threads 16 \
    --batch-size 16384 --ddp-steps 60 --json $OUT/ddp16k_side$side.json 2>&1 | grep -E "ddp gpu:|\[skip\]|Error|error" | tail -4
  echo "  ^ GCAD_SIDE_STREAM=$side"
done

stage "bench.gpu ddp: 65536 seeds, side stream on"
timeout 80 python3 -m bench.gpu --sections ddp --ddp-runs gpu --store $S --threads 16 --batch-size 65536 --ddp-steps 30 \
  --json $OUT/ddp64k.json 2>&1 | grep -E "ddp gpu:|\[skip\]|Error|error" | tail -4

stage "bench.gpu_step: 1024 16384 65536, profile 16384"
timeout 90 python3 -m bench.gpu_step --store $S --batch-sizes 1024 16384 65536 --profile 16384 --threads 16 2>&1 | grep -v "^\s*$" | tail -45

stage "full-batch tolokers on the GPU (default recipe)"
timeout 150 python3 -m gcad_dist.train --graph "$DATA/tolokers.npz" --out /tmp/tol --device cuda --no-progress --no-plots 2>&1 | tail -6
python3 -c "import json; m=json.load(open('/tmp/tol/metrics.json')); print({k: m[k] for k in m if k in ('test','val','time_s','train_time_s','seconds')})" 2>&1 | tail -3
cp /tmp/tol/metrics.json $OUT/tolokers_cuda_metrics.json 2>/dev/null
stage done
