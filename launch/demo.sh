#!/usr/bin/env bash
# End-to-end on a small default, one machine, Ray in-process:
#   generate a graph with planted anomalies -> Zarr store -> GCCAD-pre on Ray Train (1 worker, no labels)
#   -> per-node scores -> AUROC against the planted labels.
# RECIPE=local (default): the label-free recipe, a whole-graph store (build --k 1), pre-training's --recipe auto
#   picks the local contrast for it, whole-graph scoring (README, "Distributed pre-training").
# RECIPE=paper: METHOD.md section 4, FAISS K-means parts (--k auto) with injected nodes, the graph contrast, and
#   each node scored against its part's context (--parts, halo).
# Environment: NODES (default 20000), WORKERS (1), EPOCHS (3), OUT (runs/demo), RECIPE (local).
set -euo pipefail
cd "$(dirname "$0")/.."
bash launch/setup.sh
# shellcheck disable=SC1091
. .venv/bin/activate
NODES=${NODES:-20000}; WORKERS=${WORKERS:-1}; EPOCHS=${EPOCHS:-3}; OUT=${OUT:-runs/demo}; RECIPE=${RECIPE:-local}
mkdir -p "$OUT"
set -x
python -m partitioning.synthetic --nodes "$NODES" --avg-degree 10 --seed 0 --out "$OUT/graph.npz"
if [ "$RECIPE" = paper ]; then
  python -m partitioning.build --graph "$OUT/graph.npz" --out "$OUT/graph.zarr" --k auto --overwrite
  python -m gcad_dist.pretrain --store "$OUT/graph.zarr" --workers "$WORKERS" --epochs "$EPOCHS" --out "$OUT/pre" --overwrite
  # each node scored against the context of its K-means part, its links into other parts kept (--context halo)
  python -m gcad_dist.score --checkpoint "$OUT/pre/final" --graph "$OUT/graph.npz" --parts "$OUT/graph.zarr" --out "$OUT/scores.parquet"
else
  python -m partitioning.build --graph "$OUT/graph.npz" --out "$OUT/graph.zarr" --k 1 --overwrite
  python -m gcad_dist.pretrain --store "$OUT/graph.zarr" --workers "$WORKERS" --epochs "$EPOCHS" --out "$OUT/pre" --overwrite
  python -m gcad_dist.score --checkpoint "$OUT/pre/final" --graph "$OUT/graph.npz" --out "$OUT/scores.parquet"
fi
