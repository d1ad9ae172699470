# Sourced by the one-call scripts of an offline GPU host (bench/gpu_offline.sh, bench/gpu_labelfree.sh): $OUT, the
# `stage` banner, and the site folder of the packages the host's image lacks (GCAD_SITE, a .tar.xz of `site312/`;
# BENCHMARKS.md, session 27, says how to make it) unpacked to /tmp and put on PYTHONPATH; then what the host has.
SITE=${GCAD_SITE:-.whl/site312.tar.xz}
export PYTHONUNBUFFERED=1 OMP_WAIT_POLICY=PASSIVE
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
T0=$(date +%s)
stage() { echo; echo "=== [$(( $(date +%s) - T0 ))s] $*"; }
stage setup
[ -d /tmp/site312 ] || tar -C /tmp -xJf "$SITE" || exit 1
export PYTHONPATH=/tmp/site312:$PWD
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 -c "import torch, ray, zarr, faiss, sklearn, torch_geometric as g; print('torch', torch.__version__, 'ray', ray.__version__, 'zarr', zarr.__version__, 'faiss', faiss.__version__, 'sklearn', sklearn.__version__, 'pyg', g.__version__, 'cuda', torch.cuda.is_available())"
echo "cores: $(nproc)"
