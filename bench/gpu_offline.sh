#!/usr/bin/env bash
# GPU figures on an offline GPU host (no package registry), in one call: BENCHMARKS.md, sessions 27 and 34.
#
#   GCAD_SITE=.whl/site312.tar.xz GCAD_DATA=.whl/data bash bench/gpu_offline.sh
#
# GCAD_SITE: a .tar.xz of a site folder `site312/` holding the packages the host lacks (made on a machine with a
# registry; BENCHMARKS.md, session 27, says how), unpacked to /tmp and put on PYTHONPATH. GCAD_DATA: a folder with
# tolokers.npz (the full-batch run). Stages, each under `timeout`: the GPU tests; a generated 1M-node graph and two
# stores of it (K=4 corrupt subgraphs, the paper's recipe; K=1 without corruption, the label-free local recipe);
# Ray Train epochs (one NCCL worker) of the paper's recipe at 65536 and 131072 seeds a step, and at 65536 with the
# training loop's per-step host sync off and on (alternated; session 34's pair was cut by its time limit); one default
# `gcad_dist.pretrain` epoch on the K=1 store (--batch-size auto / --lr auto); a default `gcad_dist.train` run on
# tolokers on the GPU. FAISS on the GPU needs a bundle of its own (bench/faiss_gpu_cuda13/setup.sh): one call each,
# each under the 64 MiB carry. About 8-9 minutes on an H100 (session 34: 290 s before the sync pair was added).
# JSON and the log go to $OUT (default /tmp/out).
set -uo pipefail
DATA=${GCAD_DATA:-.whl/data}
source "$(dirname "$0")/gpu_site.sh" || exit 1

stage "pytest: GPU-touching files"
timeout 90 python3 -m pytest -q -p no:cacheprovider tests/test_sharding.py tests/test_sampler.py tests/test_kmeans_torch.py \
  tests/test_degree_cap.py tests/test_context_ball.py -k "cuda or gpu or side_stream or backend" 2>&1 | tail -6

stage "stores: generated 1M nodes; K=4 corrupt subgraphs, and K=1 whole graph"
timeout 60 python3 -m partitioning.synthetic --out /tmp/g1m.npz --nodes 1000000 --seed 0 2>&1 | tail -1
timeout 60 python3 -m partitioning.build --graph /tmp/g1m.npz --out /tmp/s1m.zarr --k 4 --no-plot --no-progress --threads 16 2>&1 | tail -2
timeout 60 python3 -m partitioning.build --graph /tmp/g1m.npz --out /tmp/s1m_k1.zarr --k 1 --corruption-mix none --no-plot --no-progress --threads 16 2>&1 | tail -2

stage "paper recipe, Ray Train epoch, 1 NCCL worker: 65536 and 131072 seeds a step"
for bs in 65536 131072; do
  timeout 80 python3 -m bench.gpu --sections ddp --ddp-runs gpu --store /tmp/s1m.zarr --threads 16 --batch-size $bs \
    --ddp-steps $(( 1966080 / bs )) --json $OUT/ddp_$bs.json 2>&1 | grep -E "ddp gpu:|\[skip\]|Error|error" | tail -4
  echo "  ^ $bs seeds a step"
done

stage "the loop's per-step host sync off/on (GCAD_STEP_SYNC=0|1, session 34), 65536 seeds, 60 steps, alternated"
i=0
for sync in 0 1 0; do
  i=$((i + 1))
  GCAD_STEP_SYNC=$sync timeout 120 python3 -m bench.gpu --sections ddp --ddp-runs gpu --store /tmp/s1m.zarr --threads 16 \
    --batch-size 65536 --ddp-steps 60 --json $OUT/ddp64k_sync${sync}_$i.json 2>&1 | grep -E "ddp gpu:|\[skip\]|Error|error" | tail -4
  echo "  ^ GCAD_STEP_SYNC=$sync"
done

stage "default gcad_dist.pretrain epoch on the K=1 store (local recipe, --batch-size auto, --lr auto)"
timeout 150 python3 -m gcad_dist.pretrain --store /tmp/s1m_k1.zarr --out /tmp/pre_local --workers 1 --gpus-per-worker 1 \
  --cpus-per-worker 16 --epochs 1 --no-progress --overwrite 2>&1 | grep -vE "^\s*$" | tail -8
python3 -c "import json; m=json.load(open('/tmp/pre_local/metrics.json')); h=m['history'][-1]; print({k: h.get(k) for k in ('steps','seeds_per_s','edges_per_s','wait_frac','time_s','loss')})" 2>&1 | tail -2
cp /tmp/pre_local/metrics.json $OUT/pretrain_local_metrics.json 2>/dev/null

stage "full-batch tolokers on the GPU (default recipe)"
timeout 120 python3 -m gcad_dist.train --graph "$DATA/tolokers.npz" --out /tmp/tol --device cuda --no-progress --no-plots 2>&1 | tail -4
python3 -c "import json; m=json.load(open('/tmp/tol/metrics.json')); print({k: m[k] for k in m if k in ('test','val','time_s','train_time_s','seconds')})" 2>&1 | tail -3
cp /tmp/tol/metrics.json $OUT/tolokers_cuda_metrics.json 2>/dev/null
stage done
