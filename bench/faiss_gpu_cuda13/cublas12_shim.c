/* libcublas.so.12 for Meta's CUDA-12 faiss-gpu wheel on a CUDA-13-only host: the eight cuBLAS entry points
 * libfaiss.so imports (versioned libcublas.so.12), each a jump to the same function of libcublas.so.13
 * (the v2 API's signatures are unchanged between 12 and 13). Built on the host by bench/faiss_gpu_cuda13/setup.sh. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#define N 8
static const char *names[N] = {"cublasCreate_v2", "cublasDestroy_v2", "cublasGemmEx", "cublasGemmStridedBatchedEx",
                               "cublasGetMathMode", "cublasSetMathMode", "cublasSetStream_v2", "cublasSgemmEx"};
void *gcad_cublas13_fn[N];
__attribute__((constructor)) static void gcad_cublas13_load(void) {
    const char *path = getenv("GCAD_CUBLAS13");
    void *h = dlopen(path && *path ? path : "libcublas.so.13", RTLD_NOW | RTLD_GLOBAL);
    if (!h) { fprintf(stderr, "cublas12 shim: %s\n", dlerror()); abort(); }
    for (int i = 0; i < N; i++) {
        gcad_cublas13_fn[i] = dlsym(h, names[i]);
        if (!gcad_cublas13_fn[i]) { fprintf(stderr, "cublas12 shim: no %s\n", names[i]); abort(); }
    }
}
#define TRAMP(name, i) __asm__(".text\n.globl " #name "\n.type " #name ",@function\n" #name ":\n" \
                               "  jmp *gcad_cublas13_fn+" #i "*8(%rip)\n.size " #name ",.-" #name "\n");
TRAMP(cublasCreate_v2, 0)
TRAMP(cublasDestroy_v2, 1)
TRAMP(cublasGemmEx, 2)
TRAMP(cublasGemmStridedBatchedEx, 3)
TRAMP(cublasGetMathMode, 4)
TRAMP(cublasSetMathMode, 5)
TRAMP(cublasSetStream_v2, 6)
TRAMP(cublasSgemmEx, 7)
