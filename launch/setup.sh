#!/usr/bin/env bash
# Create .venv and install gcad-dist with its test tools. Idempotent: a second run only checks.
#   GCAD_WITH_TORCH_SPARSE=1  also build torch-scatter + torch-sparse from source (~11 min on 2 cores);
#                             without it the built-in sampler (and pyg-lib if installed) is used
#   PYTHON=python3.11         interpreter for the venv
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "[setup] creating .venv with $($PY --version)"
  "$PY" -m venv .venv
fi
# shellcheck disable=SC1091
. .venv/bin/activate
export PIP_DISABLE_PIP_VERSION_CHECK=1
# torch first, pinned: an unpinned torch pulls several GB of CUDA packages on a CPU host.
# On a GPU host install the CUDA build of torch before running this script; it is kept.
python -c "import torch" 2>/dev/null || { echo "[setup] installing torch 2.13.0 (CPU)"; pip install -q torch==2.13.0; }
echo "[setup] installing gcad-dist and its dependencies"
# the versions BENCHMARKS.md was measured with (launch/constraints.txt); GCAD_UNPINNED=1: the newest allowed
PIN=(-c launch/constraints.txt)
[ "${GCAD_UNPINNED:-0}" = 1 ] && PIN=()
pip install -q "${PIN[@]}" -e ".[cpu,dev,baselines]" 2>&1 | grep -v "is ignored: it is neither" || true
python -c "import gcad_dist, partitioning, torch_geometric, ray, zarr, faiss" \
  || { echo "[setup] install failed" >&2; exit 1; }
# the native CPU edge kernels: compiled once here (~15 s) instead of in the first training step
python -c "from gcad_dist.model import native; print('[setup]', native.status())" \
  || echo "[setup] native kernels not built: the PyTorch kernels will be used" >&2
if [ "${GCAD_WITH_TORCH_SPARSE:-0}" = 1 ] && ! python -c "import torch_sparse" 2>/dev/null; then
  echo "[setup] building torch-scatter + torch-sparse from source (about 11 min on 2 cores; cached by pip afterwards)"
  MAX_JOBS=${MAX_JOBS:-2} pip install -q --no-build-isolation torch-scatter torch-sparse 2>&1 \
    | grep -v "is ignored: it is neither" || true
  python -c "import torch_sparse" || echo "[setup] torch-sparse unavailable: the built-in sampler will be used" >&2
fi
echo "[setup] done: $(python -c 'import torch, torch_geometric, ray; print(f"torch {torch.__version__}, pyg {torch_geometric.__version__}, ray {ray.__version__}")')"
