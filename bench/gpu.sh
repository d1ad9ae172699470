#!/usr/bin/env bash
# GPU benchmark in one command: install the GPU extras on this machine, then run bench/gpu.py, which
# prints a Markdown table (each figure against its CPU counterpart, same run) and writes JSON.
#
#   bash bench/gpu.sh                          # install what is missing, then all sections
#   bash bench/gpu.sh --no-install --sections step sampler
#   bash bench/gpu.sh --cpu-smoke              # tiny sizes (also works on a machine without a GPU)
#
# Every argument but --no-install goes to `python -m bench.gpu` (see its --help). Results:
# $OUT/gpu_bench.json when $OUT is set (the device runner's output folder), else runs/gpu_bench.json.
# Environment:
#   PYTHON=...             interpreter (default: .venv/bin/python if present, else python3)
#   GCAD_TORCH=2.12.0      torch pinned when torch is missing, or a CPU build on a host with nvidia-smi
#   GCAD_CUDA=cu130        its CUDA build (download.pytorch.org/whl/<this>; cu130 needs driver >= 580)
#   GCAD_WHEELHOUSE=dir    install from this folder only (pip --no-index --find-links): offline hosts
# Installs, each skipped with a reason when it cannot be done (nothing here is fatal):
#   torch (pinned CUDA build) -> the project -> faiss-gpu (Meta's PyPI wheel, CUDA 12; replaces
#   faiss-cpu, both provide `faiss`) -> pyg-lib and torch-sparse/torch-scatter wheels from data.pyg.org.
set -uo pipefail
cd "$(dirname "$0")/.."

INSTALL=1
ARGS=()
for a in "$@"; do
  if [ "$a" = "--no-install" ]; then INSTALL=0; else ARGS+=("$a"); fi
done
if [ -n "${PYTHON:-}" ]; then PY=$PYTHON
elif [ -x .venv/bin/python ]; then PY=.venv/bin/python
else PY=python3; fi
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_DEFAULT_TIMEOUT=${PIP_DEFAULT_TIMEOUT:-30}
TORCH_PIN=${GCAD_TORCH:-2.12.0}
CUDA_TAG=${GCAD_CUDA:-cu130}
FAISS_GPU="faiss-gpu==1.15.1"

say() { echo "[gpu.sh] $*"; }
pipi() {  # pip install, from the wheelhouse when one is given
  if [ -n "${GCAD_WHEELHOUSE:-}" ]; then "$PY" -m pip install -q --no-index --find-links "$GCAD_WHEELHOUSE" "$@"
  else "$PY" -m pip install -q --retries 1 "$@"; fi
}
online() {
  [ -n "${GCAD_WHEELHOUSE:-}" ] && return 0
  "$PY" -c "import urllib.request as u; u.urlopen('https://pypi.org/simple/faiss-gpu/', timeout=8)" 2>/dev/null
}
has() { "$PY" -c "$1" >/dev/null 2>&1; }

say "python: $("$PY" --version 2>&1) ($PY)"
if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | sed 's/^/[gpu.sh] GPU: /'
  GPU_HOST=1
else
  say "no nvidia-smi: no NVIDIA GPU here; the GPU rows will be skipped"
  GPU_HOST=0
fi

if [ "$INSTALL" = 1 ] && [ "$GPU_HOST" = 0 ]; then
  say "no GPU here: installing nothing (the benchmark runs with what is installed)"
elif [ "$INSTALL" = 1 ]; then
  if ! online; then
    say "skipping installs: PyPI is not reachable from this host (set GCAD_WHEELHOUSE to a folder of wheels)"
  else
    # 1. torch: keep a CUDA build that is there; otherwise the pinned one
    if ! has "import torch" || has "import torch, sys; sys.exit(torch.version.cuda is not None)"; then
      say "installing torch==$TORCH_PIN ($CUDA_TAG)"
      if [ -n "${GCAD_WHEELHOUSE:-}" ]; then pipi "torch==$TORCH_PIN" || say "torch install failed"
      else pipi "torch==$TORCH_PIN" --index-url "https://download.pytorch.org/whl/$CUDA_TAG" || say "torch install failed"; fi
    fi
    has "import torch" || { say "torch is not importable: cannot run the benchmark"; exit 1; }
    # 2. the project (its dependencies: torch-geometric, ray, zarr, ...)
    if ! has "import gcad_dist, partitioning, torch_geometric, ray, zarr"; then
      say "installing the project (pip install -e .)"
      pipi -e . || say "project install failed; sections that need the missing pieces will be skipped"
    fi
    # 3. faiss-gpu: Meta's wheel replaces faiss-cpu / the third-party faiss-gpu-cu12 (same module name)
    if ! has "import faiss, sys; sys.exit(faiss.get_num_gpus() == 0)"; then
      WH=$(mktemp -d)
      if [ -n "${GCAD_WHEELHOUSE:-}" ]; then cp "$GCAD_WHEELHOUSE"/faiss_gpu-*.whl "$WH"/ 2>/dev/null
      else "$PY" -m pip download -q --no-deps -d "$WH" "$FAISS_GPU" 2>/dev/null; fi
      if ls "$WH"/faiss_gpu-*.whl >/dev/null 2>&1; then
        say "installing $FAISS_GPU (replaces faiss-cpu)"
        "$PY" -m pip uninstall -q -y faiss-cpu faiss-gpu-cu12 >/dev/null 2>&1
        if ! pipi "$WH"/faiss_gpu-*.whl; then
          say "faiss-gpu install failed; putting faiss-cpu back"
          pipi "faiss-cpu>=1.8" || say "faiss-cpu install failed too"
        fi
      else
        say "$FAISS_GPU is not available here: GPU K-means rows will be skipped"
      fi
      rm -rf "$WH"
    fi
    # 4. compiled samplers: wheels of exactly this torch + CUDA build from data.pyg.org (no source builds)
    PYG_PAGE=$("$PY" -c "import torch; v=torch.__version__.split('+')[0]; c=torch.version.cuda; \
print(f'https://data.pyg.org/whl/torch-{v}+' + ('cu' + c.replace('.', '') if c else 'cpu') + '.html')" 2>/dev/null)
    if [ -n "$PYG_PAGE" ]; then
      has "import pyg_lib" || { say "pyg-lib from $PYG_PAGE"; pipi --only-binary=:all: pyg-lib -f "$PYG_PAGE" \
        || say "no pyg-lib wheel for this torch build: that row will be skipped"; }
      has "import torch_sparse" || { say "torch-sparse from $PYG_PAGE"; pipi --only-binary=:all: torch-scatter torch-sparse \
        -f "$PYG_PAGE" || say "no torch-sparse wheel for this torch build: that row will be skipped"; }
    fi
  fi
fi

"$PY" -c "import torch; print('[gpu.sh] torch', torch.__version__, 'cuda', torch.cuda.is_available())" 2>/dev/null
"$PY" -c "import faiss; print('[gpu.sh] faiss', faiss.__version__, 'gpus', faiss.get_num_gpus())" 2>/dev/null \
  || say "faiss is not importable"
RESULTS=${OUT:-runs}/gpu_bench.json
mkdir -p "$(dirname "$RESULTS")"
exec "$PY" -m bench.gpu --json "$RESULTS" "${ARGS[@]}"
