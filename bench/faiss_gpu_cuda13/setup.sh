#!/usr/bin/env bash
# Meta's faiss-gpu wheel (CUDA 12) on an offline host that has CUDA 13 only (the lent GPU machines: torch
# 2.11+cu130, no registry, 64 MiB carry). Source it:   source bench/faiss_gpu_cuda13/setup.sh BUNDLE
#
# BUNDLE (made on a machine with a registry, BENCHMARKS.md session 34 says how): libfaiss.so.xz (the wheel's
# 199 MB libfaiss.so, 50 MB as xz), faiss_rest.tar.xz (the rest of the wheel: faiss/, faiss_gpu.libs/, with
# faiss/__init__.py patched to read FAISS_CU12_LIBDIR), libcudart.so.12 (nvidia-cuda-runtime-cu12 12.8, runs on
# the CUDA 13 driver), and stand-ins for the two CUDA 12 libraries the host lacks: libcublas.so.12, built here
# from cublas12_shim.c (the eight cuBLAS calls libfaiss.so makes, each a jump to libcublas.so.13's; the
# prebuilt one in BUNDLE if there is no compiler), and empty libcublasLt.so.12 / libcurand.so.10 (needed by
# name only: libfaiss.so calls neither). Sets PYTHONPATH, FAISS_CU12_LIBDIR and GCAD_CUBLAS13.
B=${1:?bundle folder}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
D=/tmp/faiss_cu13
mkdir -p $D/site $D/lib
[ -f $D/site/faiss/libfaiss.so ] || { tar -C $D/site -xJf "$B/faiss_rest.tar.xz" && xz -dc "$B/libfaiss.so.xz" > $D/site/faiss/libfaiss.so; } || return 1
cp "$B"/libcudart.so.12 "$B"/libcublasLt.so.12 "$B"/libcurand.so.10 $D/lib/
GCAD_CUBLAS13=$(python3 -c "import glob, os, sys; c=[p for d in sys.path for p in glob.glob(os.path.join(d, 'nvidia', '*', 'lib', 'libcublas.so.13'))]; print(c[0] if c else '')")
[ -n "$GCAD_CUBLAS13" ] || GCAD_CUBLAS13=$(ldconfig -p | awk '/libcublas.so.13 /{print $NF; exit}')
echo "faiss_gpu_cuda13: libcublas.so.13 = ${GCAD_CUBLAS13:-not found}"
if ! gcc -O2 -shared -fPIC -o $D/lib/libcublas.so.12 -Wl,-soname,libcublas.so.12 \
      -Wl,--version-script="$HERE/cublas12.map" "$HERE/cublas12_shim.c" -ldl 2>/dev/null; then
  echo "faiss_gpu_cuda13: no compiler, using the prebuilt shim"; cp "$B/libcublas.so.12" $D/lib/
fi
export GCAD_CUBLAS13 FAISS_CU12_LIBDIR=$D/lib PYTHONPATH=$D/site${PYTHONPATH:+:$PYTHONPATH}
