// Fused per-edge kernels of GCCAD for the CPU (gcad_dist/model/native.py builds and loads this file).
//
// * link MLP (gcad_dist/model/edge_update.py, _LinkMLP):
//     logit_e = w2s . (ReLU(W1 |h[d] - h[s]| + ud[d] + us[s]) * keep_e),  e = (s -> d)
//   forward and backward in one pass over the edges, in blocks of `block` edges whose [block, h]
//   temporaries stay in L2; the [block, h] x [h, h] products (one per block forward, two backward) go
//   to BLAS, the rest is one vectorisable loop over h per edge. Between forward and backward only the
//   indices and one bit per edge and unit (ReLU(z) * keep > 0; h / 8 bytes per edge) are kept: the
//   backward needs no recomputation of the pre-activation (see link_mlp_backward_impl).
// * dropout: keep_e[j] = (fmix32(lo + j * 0x9E3779B9) ^ hi) >= threshold, (hi, lo) = splitmix64(seed
//   + e * 0x9E3779B97F4A7C15): a counter-based hash of (seed, edge, unit), no generator state and no
//   [E, h] mask. Keep probability 1 - threshold / 2^32.
// * weighted sum (gcad_dist/model/aggregate.py): out[d] += w_e x[s], and its backward.
// * dropout of the node updates (gcad_dist/model/dropout.py): the same hash per (seed, row, unit), recomputed in the
//   backward pass.
//
// Every per-unit loop is branch-free (a select over operands read unconditionally), so the compiler vectorises it:
// a ReLU or sign written as a branch on data compiled to one mispredicted jump per unit (the link MLP forward took 4x
// as long; BENCHMARKS.md, session 25). Rows gathered or added to through an edge's random endpoint are prefetched
// kPrefetchEdges edges ahead; the mask bits are packed and unpacked with AVX2 (or AVX-512) where the CPU has it.
//
// Threads: T = 1 runs the serial loops. With T > 1 (torch's intra-op threads, torch.set_num_threads, at most one per
// kMinEdgesPerTask edges, run by at::parallel_for) the per-edge work is split into T contiguous edge ranges, and the
// per-node sums (scatters) are taken one of two ways (owner_computes):
// * sparse inputs (E <= T x rows, a neighbour-sampled minibatch): by the one task that owns the node ("owner
//   computes"): the edges are grouped by target and by source (a counting sort), the nodes split into T ranges of
//   about equal edge counts, and each node's sum taken over its own edges in ascending edge order. No private copies
//   to zero and add up; the per-node sums equal the serial loop's bit for bit, and only the [h, h] weight sums (and a
//   term that is one row for every edge) are added over tasks;
// * dense inputs (a full graph): into T private [rows, h] copies, added up at the end (T capped by kPrivateBudget
//   bytes of copies); the per-node sums then differ from the serial loop's by summation order.
// Either way the result depends on T, never on the scheduling.

#include <ATen/ATen.h>
#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <tuple>
#include <type_traits>
#include <vector>

namespace {

using at::Tensor;

inline uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// rows gathered this many edges ahead are prefetched (a row of h = 64 floats is four cache lines from L3 on a graph
// whose [N, h] tables outgrow L2)
constexpr int64_t kPrefetchEdges = 8;

// prefetch the `bytes` of a row into the cache; Write = 1 for a row about to be added to (read and written)
template <int Write = 0>
inline void prefetch_row(const void* p, int64_t bytes) {
  const char* c = static_cast<const char*>(p);
  for (int64_t o = 0; o < bytes; o += 64) __builtin_prefetch(c + o, Write, 3);
}

// the dropout keep mask of edge `e`: keep[j] = 1 (kept) or 0 (dropped)
template <typename scalar_t>
inline void keep_mask(uint64_t seed, int64_t e, int64_t h, uint32_t threshold, scalar_t* __restrict keep) {
  const uint64_t k = splitmix64(seed + static_cast<uint64_t>(e) * 0x9E3779B97F4A7C15ull);
  const uint32_t lo = static_cast<uint32_t>(k), hi = static_cast<uint32_t>(k >> 32);
#pragma omp simd
  for (int64_t j = 0; j < h; ++j) {
    uint32_t x = lo + static_cast<uint32_t>(j) * 0x9E3779B9u;
    x ^= x >> 16;
    x *= 0x85EBCA6Bu;
    x ^= x >> 13;
    x *= 0xC2B2AE35u;
    x ^= x >> 16;
    keep[j] = (x ^ hi) >= threshold ? scalar_t(1) : scalar_t(0);
  }
}

// Fortran BLAS of libtorch_cpu (MKL / OpenBLAS, 32-bit integers as ATen declares them); weak, so that
// a torch without these symbols still loads this library and takes the ATen path below
extern "C" {
void sgemm_(const char* transa, const char* transb, const int* m, const int* n, const int* k, const float* alpha,
            const float* a, const int* lda, const float* b, const int* ldb, const float* beta, float* c,
            const int* ldc) __attribute__((weak));
void dgemm_(const char* transa, const char* transb, const int* m, const int* n, const int* k, const double* alpha,
            const double* a, const int* lda, const double* b, const int* ldb, const double* beta, double* c,
            const int* ldc) __attribute__((weak));
}

template <typename scalar_t>
struct Blas;
template <>
struct Blas<float> {
  static constexpr auto fn() { return &sgemm_; }
};
template <>
struct Blas<double> {
  static constexpr auto fn() { return &dgemm_; }
};

// row-major C[m, n] = alpha op(A) op(B) + beta C, all contiguous rows (BLAS is column-major: it computes
// C^T = op(B)^T op(A)^T on the same memory)
template <typename scalar_t>
inline void gemm_rm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, scalar_t alpha, const scalar_t* a, int64_t lda,
                    const scalar_t* b, int64_t ldb, scalar_t beta, scalar_t* c, int64_t ldc) {
  auto* f = Blas<scalar_t>::fn();
  if (f != nullptr && m < INT32_MAX && n < INT32_MAX && k < INT32_MAX) {
    const char ca = ta ? 'T' : 'N', cb = tb ? 'T' : 'N';
    const int im = static_cast<int>(m), in = static_cast<int>(n), ik = static_cast<int>(k);
    const int ila = static_cast<int>(lda), ilb = static_cast<int>(ldb), ilc = static_cast<int>(ldc);
    f(&cb, &ca, &in, &im, &ik, &alpha, b, &ilb, a, &ila, &beta, c, &ilc);
    return;
  }
  auto opt = at::TensorOptions().dtype(c10::CppTypeToScalarType<scalar_t>::value);
  Tensor ta_ = ta ? at::from_blob(const_cast<scalar_t*>(a), {k, m}, {lda, 1}, opt).t()
                  : at::from_blob(const_cast<scalar_t*>(a), {m, k}, {lda, 1}, opt);
  Tensor tb_ = tb ? at::from_blob(const_cast<scalar_t*>(b), {n, k}, {ldb, 1}, opt).t()
                  : at::from_blob(const_cast<scalar_t*>(b), {k, n}, {ldb, 1}, opt);
  Tensor tc = at::from_blob(c, {m, n}, {ldc, 1}, opt);
  if (beta == scalar_t(0)) {
    at::mm_out(tc, ta_, tb_);
    if (alpha != scalar_t(1)) tc.mul_(alpha);
  } else {
    tc.addmm_(ta_, tb_, beta, alpha);
  }
}

void check_edges(const Tensor& src, const Tensor& dst) {
  TORCH_CHECK(src.scalar_type() == at::kLong && dst.scalar_type() == at::kLong, "edge indices must be int64");
  TORCH_CHECK(src.numel() == dst.numel(), "src and dst differ in length");
}

// per-node term: [R, h] (row stride h; R rows, indexed by the edges' target (ud) or source (us) node, so R may be
// below the N rows of h when those indices are), [h] (one vector for every edge: row stride 0) or absent
struct NodeTerm {
  const void* ptr = nullptr;
  int64_t stride = 0;
  int64_t rows = 1;
};

NodeTerm node_term(const std::optional<Tensor>& t, int64_t h) {
  NodeTerm r;
  if (t.has_value() && t->defined()) {
    TORCH_CHECK(t->is_contiguous() && (t->dim() == 1 || t->dim() == 2) && t->size(-1) == h, "bad per-node term");
    r.ptr = t->data_ptr();
    r.stride = t->dim() == 2 ? h : 0;
    r.rows = t->dim() == 2 ? t->size(0) : 1;
  }
  return r;
}

// |h[d] - h[s]| into a, h[d] - h[s] into diff (when given), for edges lo .. lo + rows
template <typename scalar_t>
inline void gather_abs_diff(const scalar_t* __restrict hp, const int64_t* __restrict sp, const int64_t* __restrict dp,
                            int64_t lo, int64_t rows, int64_t h, scalar_t* __restrict a, scalar_t* __restrict diff) {
  for (int64_t b = 0; b < rows; ++b) {
    if (b + kPrefetchEdges < rows) {
      prefetch_row(hp + sp[lo + b + kPrefetchEdges] * h, h * sizeof(scalar_t));
      prefetch_row(hp + dp[lo + b + kPrefetchEdges] * h, h * sizeof(scalar_t));
    }
    const scalar_t* __restrict hd = hp + dp[lo + b] * h;
    const scalar_t* __restrict hs = hp + sp[lo + b] * h;
    scalar_t* __restrict ab = a + b * h;
    if (diff != nullptr) {
      scalar_t* __restrict db = diff + b * h;
#pragma omp simd
      for (int64_t j = 0; j < h; ++j) {
        const scalar_t v = hd[j] - hs[j];
        db[j] = v;
        ab[j] = v < 0 ? -v : v;
      }
    } else {
#pragma omp simd
      for (int64_t j = 0; j < h; ++j) {
        const scalar_t v = hd[j] - hs[j];
        ab[j] = v < 0 ? -v : v;
      }
    }
  }
}

// sign(d) x (0 where d is 0), branch-free: both operands are read unconditionally, so a loop over units vectorises
template <typename scalar_t>
inline scalar_t signed_by(scalar_t d, scalar_t x) {
  return d > 0 ? x : (d < 0 ? -x : scalar_t(0));
}

// bit j of words[0 .. ceil(h / 64)) = v[j] > 0
template <typename scalar_t>
inline void pack_positive(const scalar_t* __restrict v, int64_t h, uint64_t* __restrict words) {
  int64_t j = 0;
#if defined(__AVX512F__)
  if constexpr (std::is_same_v<scalar_t, float>) {
    const __m512 zero = _mm512_setzero_ps();
    for (; j + 16 <= h; j += 16) {
      const uint64_t m = _mm512_cmp_ps_mask(_mm512_loadu_ps(v + j), zero, _CMP_GT_OQ);
      if ((j & 63) == 0) words[j >> 6] = 0;
      words[j >> 6] |= m << (j & 63);
    }
  }
#endif
#if defined(__AVX2__) && !defined(__AVX512F__)
  if constexpr (std::is_same_v<scalar_t, float>) {
    const __m256 zero = _mm256_setzero_ps();
    for (; j + 8 <= h; j += 8) {
      const uint64_t m = static_cast<uint32_t>(_mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(v + j), zero, _CMP_GT_OQ)));
      if ((j & 63) == 0) words[j >> 6] = 0;
      words[j >> 6] |= m << (j & 63);
    }
  }
#endif
  for (; j < h; ++j) {
    if ((j & 63) == 0) words[j >> 6] = 0;
    words[j >> 6] |= static_cast<uint64_t>(v[j] > 0) << (j & 63);
  }
}

// out[j] = bit j of words ? g : 0
template <typename scalar_t>
inline void unpack_scaled(const uint64_t* __restrict words, int64_t h, scalar_t g, scalar_t* __restrict out) {
  int64_t j = 0;
#if defined(__AVX512F__)
  if constexpr (std::is_same_v<scalar_t, float>) {
    const __m512 gv = _mm512_set1_ps(g);
    for (; j + 16 <= h; j += 16) {
      const __mmask16 m = static_cast<__mmask16>(words[j >> 6] >> (j & 63));
      _mm512_storeu_ps(out + j, _mm512_maskz_mov_ps(m, gv));
    }
  }
#endif
#if defined(__AVX2__) && !defined(__AVX512F__)
  if constexpr (std::is_same_v<scalar_t, float>) {
    const __m256 gv = _mm256_set1_ps(g);
    const __m256i lanes = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    for (; j + 8 <= h; j += 8) {
      const __m256i b = _mm256_set1_epi32(static_cast<int>((words[j >> 6] >> (j & 63)) & 0xFF));
      const __m256i m = _mm256_cmpeq_epi32(_mm256_and_si256(b, lanes), lanes);
      _mm256_storeu_ps(out + j, _mm256_and_ps(_mm256_castsi256_ps(m), gv));
    }
  }
#endif
  for (; j < h; ++j) out[j] = ((words[j >> 6] >> (j & 63)) & 1) ? g : scalar_t(0);
}

constexpr int64_t kMinEdgesPerTask = 8192;        // fewer edges per task: thread start-up dominates

constexpr int64_t kPrivateBudget = int64_t(1) << 30;  // bytes of private per-node copies over all tasks

// number of tasks to run in parallel: <= torch's threads, >= kMinEdgesPerTask edges each
int64_t num_tasks(int64_t edges) {
  if (at::in_parallel_region()) return 1;
  return std::max<int64_t>(std::min<int64_t>(at::get_num_threads(), edges / kMinEdgesPerTask), 1);
}

// Whether `tasks` > 1 tasks sum per node by the nodes' owners (owner computes) rather than into private copies of the
// `rows` per-node rows: when the edges are few against the copies, E <= T rows (a neighbour-sampled minibatch, about
// 1.5 edges a node), grouping the edges moves less memory than zeroing and adding up T copies; on a dense full graph
// (tolokers: 88 edges a node) the T copies are small and stay in cache, while grouping a million edges (and the link
// MLP's per-edge buffer) costs more: 1.6x the step, measured (BENCHMARKS.md, session 23).
inline bool owner_computes(int64_t edges, int64_t tasks, int64_t rows) { return tasks > 1 && edges <= tasks * rows; }

// tasks of the private-copies path: at most `tasks`, and their copies (`private_bytes` each) within kPrivateBudget
int64_t private_tasks(int64_t tasks, int64_t private_bytes) {
  return std::max<int64_t>(std::min<int64_t>(tasks, kPrivateBudget / std::max<int64_t>(private_bytes, 1)), 1);
}

// out = the sum of the T private copies priv[0 .. T) (out's contents are overwritten, so it need not be zeroed):
// one binary add for two copies (a single pass, unlike the reduction kernel over the leading dimension)
void sum_private(Tensor& out, const Tensor& priv) {
  if (priv.size(0) == 2) {
    at::add_out(out, priv.select(0, 0), priv.select(0, 1));
  } else {
    at::sum_out(out, priv, {0});
  }
}

// run fn(task, lo, hi) on the T contiguous edge ranges of [0, edges), their bounds multiples of `align` (the
// block size: the blocks, hence the BLAS calls, are then the serial loop's)
template <typename Fn>
void for_ranges(int64_t edges, int64_t tasks, const Fn& fn, int64_t align = 1) {
  if (tasks <= 1) {
    fn(int64_t(0), int64_t(0), edges);
    return;
  }
  const int64_t units = (edges + align - 1) / align;
  at::parallel_for(0, tasks, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t)
      fn(t, std::min(edges, units * t / tasks * align), std::min(edges, units * (t + 1) / tasks * align));
  });
}

// The edges e0 .. e1 grouped by one endpoint (a stable counting sort): order[ptr[v] .. ptr[v + 1]) are the edges e
// with idx[e] == v in ascending order, for the nodes v < n (every idx[e] must be below n).
struct Groups {
  std::vector<int64_t> ptr, order;
  Groups(const int64_t* idx, int64_t e0, int64_t e1, int64_t n) : ptr(n + 1, 0), order(e1 - e0) {
    for (int64_t e = e0; e < e1; ++e) ++ptr[idx[e] + 1];
    for (int64_t v = 0; v < n; ++v) ptr[v + 1] += ptr[v];
    std::vector<int64_t> pos(ptr.begin(), ptr.end() - 1);
    for (int64_t e = e0; e < e1; ++e) order[pos[idx[e]]++] = e;
  }
};

// Run fn(t, v0, v1) on `tasks` contiguous ranges t of the nodes [0, n) with about equal numbers of grouped edges (those
// of `a` and, if given, of `b`) each: an owner-computes split, in which every node's sums are one task's alone.
template <typename Fn>
void for_node_ranges(int64_t n, int64_t tasks, const Groups& a, const Groups* b, const Fn& fn) {
  if (tasks <= 1 || n <= 1) {
    fn(int64_t(0), int64_t(0), n);
    return;
  }
  auto load = [&](int64_t v) { return a.ptr[v] + (b ? b->ptr[v] : 0); };
  const int64_t total = load(n);
  std::vector<int64_t> bounds(tasks + 1, n);
  bounds[0] = 0;
  int64_t v = 0;
  for (int64_t t = 1; t < tasks; ++t) {  // the first node whose prefix reaches t / tasks of the total
    while (v < n && load(v) * tasks < total * t) ++v;
    bounds[t] = v;
  }
  at::parallel_for(0, tasks, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t)
      if (bounds[t] < bounds[t + 1]) fn(t, bounds[t], bounds[t + 1]);
  });
}

// raw pointers and sizes of the link MLP's inputs (checked by check_link_inputs); an absent per-node term is null
template <typename scalar_t>
struct LinkArgs {
  const scalar_t *h, *ud, *us, *w1, *w2;
  const int64_t *src, *dst;
  int64_t ud_stride, us_stride, ud_rows, us_rows, k, n, edges;
  LinkArgs(const Tensor& h_, NodeTerm ud_, NodeTerm us_, const Tensor& w1_, const Tensor& w2s_, const Tensor& src_,
           const Tensor& dst_)
      : h(h_.data_ptr<scalar_t>()),
        ud(static_cast<const scalar_t*>(ud_.ptr)),
        us(static_cast<const scalar_t*>(us_.ptr)),
        w1(w1_.data_ptr<scalar_t>()),
        w2(w2s_.data_ptr<scalar_t>()),
        src(src_.data_ptr<int64_t>()),
        dst(dst_.data_ptr<int64_t>()),
        ud_stride(ud_.stride),
        us_stride(us_.stride),
        ud_rows(ud_.rows),
        us_rows(us_.rows),
        k(h_.size(1)),
        n(h_.size(0)),
        edges(src_.numel()) {}
};

// Forward over edges e0 .. e1: logits, and (when `bits` is given) the mask m_e[j] = [ReLU(z_e)[j] * keep_e[j] > 0]
// as bits, the only per-edge state the backward pass needs besides the indices (h / 8 bytes per edge).
template <typename scalar_t>
void link_mlp_forward_range(const LinkArgs<scalar_t>& a, uint32_t thr, int64_t seed, int64_t block, int64_t e0,
                            int64_t e1, scalar_t* op, uint64_t* bits) {
  const int64_t k = a.k, words = (k + 63) / 64;
  const int64_t *sp = a.src, *dp = a.dst;
  std::vector<scalar_t> abuf(block * k), zbuf(block * k), keep(k, scalar_t(1)), zero(k, scalar_t(0));
  // an absent term reads a row of zeros (branch-free inner loop)
  const scalar_t* udp = a.ud ? a.ud : zero.data();
  const scalar_t* usp = a.us ? a.us : zero.data();
  const int64_t ud_stride = a.ud ? a.ud_stride : 0, us_stride = a.us ? a.us_stride : 0;
  const scalar_t* __restrict w2p = a.w2;
  for (int64_t lo = e0; lo < e1; lo += block) {
    const int64_t rows = std::min(block, e1 - lo);
    gather_abs_diff(a.h, sp, dp, lo, rows, k, abuf.data(), static_cast<scalar_t*>(nullptr));
    gemm_rm<scalar_t>(false, true, rows, k, k, 1, abuf.data(), k, a.w1, k, 0, zbuf.data(), k);
    for (int64_t b = 0; b < rows; ++b) {
      const int64_t e = lo + b;
      if (b + kPrefetchEdges < rows) {
        prefetch_row(udp + dp[e + kPrefetchEdges] * ud_stride, ud_stride * sizeof(scalar_t));
        prefetch_row(usp + sp[e + kPrefetchEdges] * us_stride, us_stride * sizeof(scalar_t));
      }
      scalar_t* __restrict z = zbuf.data() + b * k;
      const scalar_t* __restrict u1 = udp + dp[e] * ud_stride;
      const scalar_t* __restrict u2 = usp + sp[e] * us_stride;
      if (thr > 0) keep_mask(static_cast<uint64_t>(seed), e, k, thr, keep.data());
      const scalar_t* __restrict kp = keep.data();
      scalar_t acc = 0;
#pragma omp simd reduction(+ : acc)
      for (int64_t j = 0; j < k; ++j) {
        scalar_t v = z[j] + u1[j] + u2[j];
        v = (v > 0 ? v : scalar_t(0)) * kp[j];  // unconditional loads: vectorised (not a branch per unit)
        z[j] = v;
        acc += v * w2p[j];
      }
      op[e] = acc;
      if (bits != nullptr) pack_positive(z, k, bits + e * words);
    }
  }
}

template <typename scalar_t>
void link_mlp_forward_impl(const LinkArgs<scalar_t>& a, int64_t threshold, int64_t seed, int64_t block, Tensor& out,
                           uint64_t* bits) {
  scalar_t* op = out.data_ptr<scalar_t>();
  const uint32_t thr = static_cast<uint32_t>(threshold);
  // every output is per edge: no private copies
  for_ranges(a.edges, num_tasks(a.edges), [&](int64_t, int64_t lo, int64_t hi) {
    link_mlp_forward_range<scalar_t>(a, thr, seed, block, lo, hi, op, bits);
  }, block);
}

// the backward's accumulators over a range of edges: dh (or null), P_d, P_s (or null), M [h, h] (or null)
template <typename scalar_t>
struct BackwardSums {
  scalar_t* gh;
  scalar_t* pd;
  scalar_t* ps;
  scalar_t* m;
};

// Backward over edges e0 .. e1, accumulated into `o` (see link_mlp_backward_impl); w1s = diag(w2s) W1
template <typename scalar_t>
void link_mlp_backward_range(const LinkArgs<scalar_t>& a, const scalar_t* gp, const scalar_t* w1s,
                             const uint64_t* bits, int64_t block, int64_t e0, int64_t e1, BackwardSums<scalar_t> o) {
  const int64_t k = a.k, words = (k + 63) / 64;
  const int64_t *sp = a.src, *dp = a.dst;
  std::vector<scalar_t> abuf(block * k), dbuf(o.gh ? block * k : 0), gbuf(block * k), gabuf(o.gh ? block * k : 0);
  for (int64_t lo = e0; lo < e1; lo += block) {
    const int64_t rows = std::min(block, e1 - lo);
    if (o.m || o.gh)
      gather_abs_diff(a.h, sp, dp, lo, rows, k, abuf.data(), o.gh ? dbuf.data() : static_cast<scalar_t*>(nullptr));
    for (int64_t b = 0; b < rows; ++b) {
      const int64_t e = lo + b;
      if (b + kPrefetchEdges < rows) {
        if (o.pd) prefetch_row<1>(o.pd + dp[e + kPrefetchEdges] * a.ud_stride, a.ud_stride * sizeof(scalar_t));
        if (o.ps) prefetch_row<1>(o.ps + sp[e + kPrefetchEdges] * a.us_stride, a.us_stride * sizeof(scalar_t));
      }
      scalar_t* __restrict gh = gbuf.data() + b * k;
      unpack_scaled(bits + e * words, k, gp[e], gh);
      if (o.pd) {
        scalar_t* __restrict od = o.pd + dp[e] * a.ud_stride;
#pragma omp simd
        for (int64_t j = 0; j < k; ++j) od[j] += gh[j];
      }
      if (o.ps) {
        scalar_t* __restrict os = o.ps + sp[e] * a.us_stride;
#pragma omp simd
        for (int64_t j = 0; j < k; ++j) os[j] += gh[j];
      }
    }
    if (o.m) gemm_rm<scalar_t>(true, false, k, k, rows, 1, gbuf.data(), k, abuf.data(), k, 1, o.m, k);
    if (o.gh) {
      gemm_rm<scalar_t>(false, false, rows, k, k, 1, gbuf.data(), k, w1s, k, 0, gabuf.data(), k);
      for (int64_t b = 0; b < rows; ++b) {
        if (b + kPrefetchEdges < rows) {
          prefetch_row<1>(o.gh + dp[lo + b + kPrefetchEdges] * k, k * sizeof(scalar_t));
          prefetch_row<1>(o.gh + sp[lo + b + kPrefetchEdges] * k, k * sizeof(scalar_t));
        }
        const scalar_t* __restrict ga = gabuf.data() + b * k;
        const scalar_t* __restrict df = dbuf.data() + b * k;
        scalar_t* __restrict od = o.gh + dp[lo + b] * k;
#pragma omp simd
        for (int64_t j = 0; j < k; ++j) od[j] += signed_by(df[j], ga[j]);
        scalar_t* __restrict os = o.gh + sp[lo + b] * k;
#pragma omp simd
        for (int64_t j = 0; j < k; ++j) os[j] -= signed_by(df[j], ga[j]);
      }
    }
  }
}

// a per-node sum P[v] that is final: acc += term[v] * P[v] (dw2's share, when acc is given), then P[v] *= w2s (when
// P is the term's gradient)
template <typename scalar_t>
inline void finish_row(scalar_t* __restrict r, const scalar_t* __restrict term, scalar_t* __restrict acc,
                       const scalar_t* __restrict w2p, bool scale, int64_t k) {
  if (acc) {
#pragma omp simd
    for (int64_t c = 0; c < k; ++c) acc[c] += term[c] * r[c];
  }
  if (scale) {
#pragma omp simd
    for (int64_t c = 0; c < k; ++c) r[c] *= w2p[c];
  }
}

constexpr int64_t kEdgeChunkBytes = int64_t(1) << 28;  // per-edge gradient rows held at once by the owner path

// Backward on `tasks` threads with no private per-node copies, over chunks of edges whose [chunk, h] rows fit in
// kEdgeChunkBytes (one chunk up to 1M edges at h = 64):
// 1. over block-aligned edge ranges (the serial loop's blocks): each edge's gradient row of h,
//    GA_e = sign(diff_e) (G^_e diag(w2s) W1), into a [chunk, h] buffer, and each task's share of M;
// 2. over node ranges (owner computes, the edges grouped by target and by source): each node's sums over its own
//    edges in ascending edge order, the in-edges adding GA_e and the out-edges subtracting it (dh), and G^_e over the
//    in-edges (P_d) and the out-edges (P_s). Those are the serial loop's sums in its order; only M, and a P_d or P_s
//    that is one row for every edge, are summed over tasks.
template <typename scalar_t>
void link_mlp_backward_owner(const LinkArgs<scalar_t>& a, const scalar_t* gp, const scalar_t* w1s, const uint64_t* bits,
                             int64_t block, int64_t tasks, BackwardSums<scalar_t> o, int64_t rows_d, int64_t rows_s,
                             int64_t chunk_edges, scalar_t* acc_w2, const scalar_t* w2p, bool scale_pd, bool scale_ps) {
  const int64_t k = a.k, n = a.n, words = (k + 63) / 64, e_total = a.edges;
  const int64_t *sp = a.src, *dp = a.dst;
  const int64_t budget = chunk_edges > 0 ? chunk_edges : kEdgeChunkBytes / (k * static_cast<int64_t>(sizeof(scalar_t)));
  const int64_t chunk = std::max<int64_t>(1, budget / block) * block;
  const bool pd_rows = o.pd && a.ud_stride != 0, ps_rows = o.ps && a.us_stride != 0;  // else one row for all edges
  std::vector<scalar_t> ga(o.gh ? std::min(chunk, e_total) * k : 0);
  std::vector<scalar_t> acc_t(acc_w2 && (pd_rows || ps_rows) ? tasks * k : 0, scalar_t(0));
  std::vector<scalar_t> m_t(o.m ? tasks * k * k : 0, scalar_t(0));
  std::vector<scalar_t> pd_one(o.pd && !pd_rows ? tasks * k : 0, scalar_t(0)), ps_one(o.ps && !ps_rows ? tasks * k : 0, scalar_t(0));
  // rows no edge reaches (a per-node term with more rows than h) are never visited below
  if (pd_rows && rows_d > n) std::fill(o.pd + n * k, o.pd + rows_d * k, scalar_t(0));
  if (ps_rows && rows_s > n) std::fill(o.ps + n * k, o.ps + rows_s * k, scalar_t(0));
  for (int64_t c0 = 0; c0 < e_total; c0 += chunk) {
    const int64_t c1 = std::min(e_total, c0 + chunk);
    const bool first = c0 == 0;
    if (o.m || o.gh || !pd_one.empty() || !ps_one.empty()) {
      for_ranges(c1 - c0, tasks, [&](int64_t t, int64_t lo, int64_t hi) {
        std::vector<scalar_t> abuf(block * k), dbuf(o.gh ? block * k : 0), gbuf(block * k);
        for (int64_t b0 = c0 + lo; b0 < c0 + hi; b0 += block) {
          const int64_t rows = std::min(block, c0 + hi - b0);
          if (o.m || o.gh)
            gather_abs_diff(a.h, sp, dp, b0, rows, k, abuf.data(), o.gh ? dbuf.data() : static_cast<scalar_t*>(nullptr));
          for (int64_t b = 0; b < rows; ++b) {
            scalar_t* __restrict g = gbuf.data() + b * k;
            unpack_scaled(bits + (b0 + b) * words, k, gp[b0 + b], g);
            if (!pd_one.empty())
              for (int64_t j = 0; j < k; ++j) pd_one[t * k + j] += g[j];
            if (!ps_one.empty())
              for (int64_t j = 0; j < k; ++j) ps_one[t * k + j] += g[j];
          }
          if (o.m) gemm_rm<scalar_t>(true, false, k, k, rows, 1, gbuf.data(), k, abuf.data(), k, 1, m_t.data() + t * k * k, k);
          if (o.gh) {
            scalar_t* gab = ga.data() + (b0 - c0) * k;
            gemm_rm<scalar_t>(false, false, rows, k, k, 1, gbuf.data(), k, w1s, k, 0, gab, k);
            for (int64_t b = 0; b < rows; ++b) {
              scalar_t* __restrict r = gab + b * k;
              const scalar_t* __restrict df = dbuf.data() + b * k;
#pragma omp simd
              for (int64_t j = 0; j < k; ++j) r[j] = signed_by(df[j], r[j]);
            }
          }
        }
      }, block);
    }
    if (!(o.gh || pd_rows || ps_rows)) continue;
    const Groups in(dp, c0, c1, n), out(sp, c0, c1, n);
    const bool last = c1 == e_total;  // the rows are final: their dw2 terms and their scaling by w2s go here
    for_node_ranges(n, tasks, in, &out, [&](int64_t t, int64_t v0, int64_t v1) {
      std::vector<scalar_t> g(k);
      scalar_t* __restrict acc = acc_t.empty() ? nullptr : acc_t.data() + t * k;
      // P[v] = sum of G^_e over the node's `count` edges at `edges` (one side), then its dw2 share and scaling
      auto side_sum = [&](scalar_t* p, int64_t v, const int64_t* edges, int64_t count, const scalar_t* term,
                          bool scale) {
        scalar_t* __restrict r = p + v * k;
        if (first) std::fill(r, r + k, scalar_t(0));
        for (int64_t i = 0; i < count; ++i) {
          unpack_scaled(bits + edges[i] * words, k, gp[edges[i]], g.data());
#pragma omp simd
          for (int64_t c = 0; c < k; ++c) r[c] += g[c];
        }
        if (last) finish_row(r, term + v * k, acc, w2p, scale, k);
      };
      for (int64_t v = v0; v < v1; ++v) {
        const int64_t i0 = in.ptr[v], i1 = in.ptr[v + 1], j0 = out.ptr[v], j1 = out.ptr[v + 1];
        if (o.gh) {  // in-edges add, out-edges subtract, merged in ascending edge order (a loop adds before it subtracts)
          scalar_t* __restrict r = o.gh + v * k;
          if (first) std::fill(r, r + k, scalar_t(0));
          int64_t i = i0, j = j0;
          while (i < i1 || j < j1) {
            const bool add = j >= j1 || (i < i1 && in.order[i] <= out.order[j]);
            const scalar_t* __restrict x = ga.data() + ((add ? in.order[i++] : out.order[j++]) - c0) * k;
            if (add) {
#pragma omp simd
              for (int64_t c = 0; c < k; ++c) r[c] += x[c];
            } else {
#pragma omp simd
              for (int64_t c = 0; c < k; ++c) r[c] -= x[c];
            }
          }
        }
        if (pd_rows && v < rows_d) side_sum(o.pd, v, in.order.data() + i0, i1 - i0, a.ud, scale_pd);
        if (ps_rows && v < rows_s) side_sum(o.ps, v, out.order.data() + j0, j1 - j0, a.us, scale_ps);
      }
    });
  }
  for (int64_t t = 0; t < tasks; ++t) {  // o.m starts at zero (the caller's); a one-row P_d / P_s is set here
    for (int64_t j = 0; !acc_t.empty() && j < k; ++j) acc_w2[j] += acc_t[t * k + j];
    for (int64_t i = 0; o.m && i < k * k; ++i) o.m[i] += m_t[t * k * k + i];
    for (int64_t j = 0; !pd_one.empty() && j < k; ++j) o.pd[j] = (t ? o.pd[j] : scalar_t(0)) + pd_one[t * k + j];
    for (int64_t j = 0; !ps_one.empty() && j < k; ++j) o.ps[j] = (t ? o.ps[j] : scalar_t(0)) + ps_one[t * k + j];
  }
}

// Backward from the forward's mask bits, with G^_e = g_e m_e (the gradient of the pre-activation is
// dz_e = w2s * G^_e) and its per-node sums P_d[n] = sum_{e: d_e = n} G^_e, P_s[n] = sum_{e: s_e = n} G^_e:
//   dud = w2s * P_d, dus = w2s * P_s, dW1 = diag(w2s) M with M = sum_e G^_e^T |diff_e| (one GEMM per block),
//   dh[d] += sign(diff_e) (G^_e diag(w2s) W1), dh[s] -= the same (one GEMM per block),
//   dw2 = scale * sum_e g_e r_e = scale * (rowdot(W1, M) + sum_n (ud[n] P_d[n] + us[n] P_s[n]))
// (r_e = m_e * z_e, z_e = W1 |diff_e| + ud[d_e] + us[s_e]): no recomputation of z, no per-edge gathers
// of ud, us.
template <typename scalar_t>
void link_mlp_backward_impl(const LinkArgs<scalar_t>& a, const Tensor& g_out, const Tensor& h, double scale,
                            const uint64_t* bits, int64_t block, Tensor& g_h, Tensor& g_ud, Tensor& g_us, Tensor& g_w1,
                            Tensor& g_w2, int64_t chunk_edges) {
  const int64_t e_total = a.edges, k = a.k, n = a.n;
  const scalar_t* gp = g_out.data_ptr<scalar_t>();
  const scalar_t *w1p = a.w1, *w2p = a.w2, *udp = a.ud, *usp = a.us;
  const bool need_m = g_w1.defined() || g_w2.defined(), need_w2 = g_w2.defined();
  // per-node sums of G^ (into the gradient tensor when it is wanted, else a scratch buffer)
  const bool want_pd = udp && (g_ud.defined() || need_w2), want_ps = usp && (g_us.defined() || need_w2);
  const int64_t rows_d = a.ud_stride ? a.ud_rows : 1, rows_s = a.us_stride ? a.us_rows : 1;
  Tensor pd_t = want_pd ? (g_ud.defined() ? g_ud : at::empty({rows_d, k}, h.options())) : Tensor();
  Tensor ps_t = want_ps ? (g_us.defined() ? g_us : at::empty({rows_s, k}, h.options())) : Tensor();
  scalar_t* pdp = want_pd ? pd_t.data_ptr<scalar_t>() : nullptr;
  scalar_t* psp = want_ps ? ps_t.data_ptr<scalar_t>() : nullptr;
  // W1 with row j scaled by w2s[j]: dz_e W1 = G^_e (diag(w2s) W1)
  std::vector<scalar_t> w1s(k * k), m(k * k, scalar_t(0));
  for (int64_t j = 0; j < k; ++j)
    for (int64_t i = 0; i < k; ++i) w1s[j * k + i] = w2p[j] * w1p[j * k + i];
  const BackwardSums<scalar_t> direct{g_h.defined() ? g_h.data_ptr<scalar_t>() : nullptr, pdp, psp,
                                      need_m ? m.data() : nullptr};
  int64_t tasks = num_tasks(e_total);
  const bool owner = owner_computes(e_total, tasks, n);
  if (!owner)
    tasks = private_tasks(tasks, static_cast<int64_t>(sizeof(scalar_t)) * k *
                                     ((direct.gh ? n : 0) + (pdp ? rows_d : 0) + (psp ? rows_s : 0) + k));
  std::vector<scalar_t> acc(k, scalar_t(0));  // dw2 / scale, summed below
  bool pd_done = false, ps_done = false;
  if (tasks <= 1) {  // accumulated in place: the (uninitialised) sums start at zero
    for (Tensor* t : {&g_h, &pd_t, &ps_t})
      if (t->defined()) t->zero_();
    link_mlp_backward_range<scalar_t>(a, gp, w1s.data(), bits, block, 0, e_total, direct);
  } else if (!owner) {  // private sums per task, then added up
    auto priv = [&](bool want, int64_t rows) { return want ? at::zeros({tasks, rows, k}, h.options()) : Tensor(); };
    Tensor gh_p = priv(direct.gh != nullptr, n), pd_p = priv(pdp != nullptr, rows_d),
           ps_p = priv(psp != nullptr, rows_s), m_p = priv(need_m, k);
    auto slice = [](Tensor& t, int64_t i) { return t.defined() ? t.select(0, i).data_ptr<scalar_t>() : nullptr; };
    for_ranges(e_total, tasks, [&](int64_t t, int64_t lo, int64_t hi) {
      link_mlp_backward_range<scalar_t>(a, gp, w1s.data(), bits, block, lo, hi,
                                        {slice(gh_p, t), slice(pd_p, t), slice(ps_p, t), slice(m_p, t)});
    }, block);
    if (gh_p.defined()) sum_private(g_h, gh_p);
    if (pd_p.defined()) sum_private(pd_t, pd_p);
    if (ps_p.defined()) sum_private(ps_t, ps_p);
    if (m_p.defined()) {
      Tensor mt = at::from_blob(m.data(), {k, k}, h.options());
      sum_private(mt, m_p);
    }
  } else {
    link_mlp_backward_owner<scalar_t>(a, gp, w1s.data(), bits, block, tasks, direct, rows_d, rows_s, chunk_edges,
                                      need_w2 ? acc.data() : nullptr, w2p, g_ud.defined(), g_us.defined());
    pd_done = pdp && a.ud_stride;  // the per-node rows' dw2 terms and scaling: done by their owners
    ps_done = psp && a.us_stride;
  }
  if (need_w2) {
    for (int64_t j = 0; j < k; ++j)
      for (int64_t i = 0; i < k; ++i) acc[j] += w1p[j * k + i] * m[j * k + i];
    for (int64_t r = 0; pdp && !pd_done && r < rows_d; ++r)
      for (int64_t j = 0; j < k; ++j) acc[j] += udp[r * k + j] * pdp[r * k + j];
    for (int64_t r = 0; psp && !ps_done && r < rows_s; ++r)
      for (int64_t j = 0; j < k; ++j) acc[j] += usp[r * k + j] * psp[r * k + j];
    scalar_t* o = g_w2.data_ptr<scalar_t>();
    for (int64_t j = 0; j < k; ++j) o[j] = static_cast<scalar_t>(acc[j] * scale);
  }
  if (g_w1.defined()) {
    scalar_t* o = g_w1.data_ptr<scalar_t>();
    for (int64_t j = 0; j < k; ++j)
      for (int64_t i = 0; i < k; ++i) o[j * k + i] = w2p[j] * m[j * k + i];
  }
  // P_d, P_s -> the gradients of ud, us
  for (Tensor* g : {&g_ud, &g_us}) {
    if (!g->defined() || (g == &g_ud ? pd_done : ps_done)) continue;
    scalar_t* o = g->data_ptr<scalar_t>();
    const int64_t rows = g->numel() / k;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < k; ++j) o[r * k + j] *= w2p[j];
  }
}

void check_link_inputs(const Tensor& h, const Tensor& w1, const Tensor& w2s, const Tensor& src, const Tensor& dst) {
  TORCH_CHECK(h.device().is_cpu(), "native kernels: CPU tensors only");
  TORCH_CHECK(h.dim() == 2 && h.is_contiguous(), "h must be a contiguous [N, h] tensor");
  const int64_t k = h.size(1);
  TORCH_CHECK(w1.dim() == 2 && w1.size(0) == k && w1.size(1) == k && w1.is_contiguous(), "w1 must be [h, h]");
  TORCH_CHECK(w2s.numel() == k && w2s.is_contiguous(), "w2 must be [h]");
  TORCH_CHECK(w1.scalar_type() == h.scalar_type() && w2s.scalar_type() == h.scalar_type(), "dtype mismatch");
  check_edges(src, dst);
  TORCH_CHECK(src.is_contiguous() && dst.is_contiguous(), "edge indices must be contiguous");
}

// (logits [E], mask bits [E, ceil(h / 64)] int64 for link_mlp_backward, or an empty tensor without `save`)
std::tuple<Tensor, Tensor> link_mlp_forward(const Tensor& h, const std::optional<Tensor>& ud,
                                            const std::optional<Tensor>& us, const Tensor& w1, const Tensor& w2s,
                                            const Tensor& src, const Tensor& dst, int64_t threshold, int64_t seed,
                                            int64_t block, bool save) {
  check_link_inputs(h, w1, w2s, src, dst);
  TORCH_CHECK(block > 0, "block must be positive");
  const int64_t k = h.size(1);
  NodeTerm tu = node_term(ud, k), ts = node_term(us, k);
  Tensor out = at::empty({src.numel()}, h.options());
  Tensor bits = at::empty({save ? src.numel() : 0, (k + 63) / 64}, h.options().dtype(at::kLong));
  uint64_t* bp = save ? reinterpret_cast<uint64_t*>(bits.data_ptr<int64_t>()) : nullptr;
  AT_DISPATCH_FLOATING_TYPES(h.scalar_type(), "link_mlp_forward", [&] {
    link_mlp_forward_impl<scalar_t>(LinkArgs<scalar_t>(h, tu, ts, w1, w2s, src, dst), threshold, seed, block, out, bp);
  });
  return {out, bits};
}

// gradients (h, ud, us, w1, w2); an unneeded one comes back as an empty tensor. chunk_edges: edges per chunk of the
// several-task path (0 = as many as fit in kEdgeChunkBytes; the tests set a few blocks to cover several chunks)
std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor> link_mlp_backward(
    const Tensor& g_out, const Tensor& h, const std::optional<Tensor>& ud, const std::optional<Tensor>& us,
    const Tensor& w1, const Tensor& w2s, double scale, const Tensor& src, const Tensor& dst, const Tensor& bits,
    int64_t block, bool need_h, bool need_ud, bool need_us, bool need_w1, bool need_w2, int64_t chunk_edges) {
  check_link_inputs(h, w1, w2s, src, dst);
  TORCH_CHECK(block > 0, "block must be positive");
  TORCH_CHECK(g_out.is_contiguous() && g_out.numel() == src.numel() && g_out.scalar_type() == h.scalar_type(),
              "bad output gradient");
  const int64_t k = h.size(1);
  TORCH_CHECK(bits.scalar_type() == at::kLong && bits.is_contiguous() && bits.dim() == 2 &&
                  bits.size(0) == src.numel() && bits.size(1) == (k + 63) / 64,
              "bad mask bits (forward run without save?)");
  NodeTerm tu = node_term(ud, k), ts = node_term(us, k);
  // uninitialised: link_mlp_backward_impl zeroes them for the serial loop; on several tasks each row is written by its owner
  Tensor g_h = need_h ? at::empty_like(h) : Tensor();
  Tensor g_ud = (need_ud && tu.ptr) ? at::empty_like(*ud) : Tensor();
  Tensor g_us = (need_us && ts.ptr) ? at::empty_like(*us) : Tensor();
  Tensor g_w1 = need_w1 ? at::empty_like(w1) : Tensor();
  Tensor g_w2 = need_w2 ? at::empty_like(w2s) : Tensor();
  const uint64_t* bp = reinterpret_cast<const uint64_t*>(bits.data_ptr<int64_t>());
  AT_DISPATCH_FLOATING_TYPES(h.scalar_type(), "link_mlp_backward", [&] {
    link_mlp_backward_impl<scalar_t>(LinkArgs<scalar_t>(h, tu, ts, w1, w2s, src, dst), g_out, h, scale, bp, block, g_h,
                                     g_ud, g_us, g_w1, g_w2, chunk_edges);
  });
  auto or_empty = [&](const Tensor& t) { return t.defined() ? t : at::empty({0}, h.options()); };
  return {or_empty(g_h), or_empty(g_ud), or_empty(g_us), or_empty(g_w1), or_empty(g_w2)};
}

template <typename scalar_t>
void weighted_sum_forward_range(const scalar_t* xp, const scalar_t* wp, const int64_t* sp, const int64_t* dp,
                                int64_t k, int64_t e0, int64_t e1, scalar_t* op) {
  for (int64_t e = e0; e < e1; ++e) {
    const scalar_t we = wp[e];
    if (we == scalar_t(0)) continue;  // removed edge: would add exactly 0 (finite x)
    const scalar_t* __restrict xs = xp + sp[e] * k;
    scalar_t* __restrict o = op + dp[e] * k;
#pragma omp simd
    for (int64_t j = 0; j < k; ++j) o[j] += we * xs[j];
  }
}

template <typename scalar_t>
void weighted_sum_forward_impl(const Tensor& x, const Tensor& w, const Tensor& src, const Tensor& dst, Tensor& out) {
  const int64_t e_total = src.numel(), k = x.size(1), n = out.size(0);
  const scalar_t* xp = x.data_ptr<scalar_t>();
  const scalar_t* wp = w.data_ptr<scalar_t>();
  const int64_t* sp = src.data_ptr<int64_t>();
  const int64_t* dp = dst.data_ptr<int64_t>();
  int64_t tasks = num_tasks(e_total);
  const bool owner = owner_computes(e_total, tasks, n);
  if (!owner) tasks = private_tasks(tasks, static_cast<int64_t>(sizeof(scalar_t)) * n * k);
  if (tasks <= 1) {  // accumulated in place into the uninitialised output
    out.zero_();
    weighted_sum_forward_range(xp, wp, sp, dp, k, 0, e_total, out.data_ptr<scalar_t>());
    return;
  }
  if (!owner) {  // private sums per task, then added up
    Tensor priv = at::zeros({tasks, n, k}, out.options());
    for_ranges(e_total, tasks, [&](int64_t t, int64_t lo, int64_t hi) {
      weighted_sum_forward_range(xp, wp, sp, dp, k, lo, hi, priv.select(0, t).data_ptr<scalar_t>());
    });
    sum_private(out, priv);
    return;
  }
  // each task sums the in-edges of its own nodes, in ascending edge order: the serial loop's sums, bit for bit
  const Groups in(dp, 0, e_total, n);
  scalar_t* op = out.data_ptr<scalar_t>();
  for_node_ranges(n, tasks, in, nullptr, [&](int64_t, int64_t v0, int64_t v1) {
    for (int64_t v = v0; v < v1; ++v) {
      scalar_t* __restrict o = op + v * k;
      std::fill(o, o + k, scalar_t(0));
      for (int64_t i = in.ptr[v]; i < in.ptr[v + 1]; ++i) {
        const int64_t e = in.order[i];
        const scalar_t we = wp[e];
        if (we == scalar_t(0)) continue;
        const scalar_t* __restrict xs = xp + sp[e] * k;
#pragma omp simd
        for (int64_t j = 0; j < k; ++j) o[j] += we * xs[j];
      }
    }
  });
}

template <typename scalar_t>
void weighted_sum_backward_range(const scalar_t* gp, const scalar_t* xp, const scalar_t* wp, const int64_t* sp,
                                 const int64_t* dp, int64_t k, int64_t e0, int64_t e1, scalar_t* gxp, scalar_t* gwp) {
  for (int64_t e = e0; e < e1; ++e) {
    const scalar_t* __restrict gd = gp + dp[e] * k;
    if (gwp) {
      const scalar_t* __restrict xs = xp + sp[e] * k;
      scalar_t acc = 0;
#pragma omp simd reduction(+ : acc)
      for (int64_t j = 0; j < k; ++j) acc += gd[j] * xs[j];
      gwp[e] = acc;
    }
    const scalar_t we = wp[e];
    if (gxp && we != scalar_t(0)) {
      scalar_t* __restrict o = gxp + sp[e] * k;
#pragma omp simd
      for (int64_t j = 0; j < k; ++j) o[j] += we * gd[j];
    }
  }
}

template <typename scalar_t>
void weighted_sum_backward_impl(const Tensor& g_out, const Tensor& x, const Tensor& w, const Tensor& src,
                                const Tensor& dst, Tensor& g_x, Tensor& g_w) {
  const int64_t e_total = src.numel(), k = x.size(1), n = x.size(0);
  const scalar_t* gp = g_out.data_ptr<scalar_t>();
  const scalar_t* xp = x.data_ptr<scalar_t>();
  const scalar_t* wp = w.data_ptr<scalar_t>();
  const int64_t* sp = src.data_ptr<int64_t>();
  const int64_t* dp = dst.data_ptr<int64_t>();
  scalar_t* gwp = g_w.defined() ? g_w.data_ptr<scalar_t>() : nullptr;  // per edge: written in place
  scalar_t* gxp = g_x.defined() ? g_x.data_ptr<scalar_t>() : nullptr;
  int64_t tasks = num_tasks(e_total);
  const bool owner = gxp && owner_computes(e_total, tasks, n);
  if (gxp && !owner) tasks = private_tasks(tasks, static_cast<int64_t>(sizeof(scalar_t)) * n * k);
  if (tasks <= 1 || !gxp) {  // one range, or only per-edge outputs: written in place
    if (gxp) g_x.zero_();  // accumulated into the uninitialised gradient
    for_ranges(e_total, tasks, [&](int64_t, int64_t lo, int64_t hi) {
      weighted_sum_backward_range(gp, xp, wp, sp, dp, k, lo, hi, gxp, gwp);
    });
    return;
  }
  if (!owner) {  // private sums per task, then added up
    Tensor priv = at::zeros({tasks, n, k}, x.options());
    for_ranges(e_total, tasks, [&](int64_t t, int64_t lo, int64_t hi) {
      weighted_sum_backward_range(gp, xp, wp, sp, dp, k, lo, hi, priv.select(0, t).data_ptr<scalar_t>(), gwp);
    });
    sum_private(g_x, priv);
    return;
  }
  // each task sums the out-edges of its own nodes in ascending edge order (the serial loop's sums, bit for bit), and
  // writes those edges' weight gradients (every edge has one source: each is written once)
  const Groups out(sp, 0, e_total, n);
  for_node_ranges(n, tasks, out, nullptr, [&](int64_t, int64_t v0, int64_t v1) {
    for (int64_t v = v0; v < v1; ++v) {
      scalar_t* __restrict o = gxp + v * k;
      const scalar_t* __restrict xs = xp + v * k;
      std::fill(o, o + k, scalar_t(0));
      for (int64_t i = out.ptr[v]; i < out.ptr[v + 1]; ++i) {
        const int64_t e = out.order[i];
        const scalar_t* __restrict gd = gp + dp[e] * k;
        if (gwp) {
          scalar_t acc = 0;
#pragma omp simd reduction(+ : acc)
          for (int64_t j = 0; j < k; ++j) acc += gd[j] * xs[j];
          gwp[e] = acc;
        }
        const scalar_t we = wp[e];
        if (we == scalar_t(0)) continue;
#pragma omp simd
        for (int64_t j = 0; j < k; ++j) o[j] += we * gd[j];
      }
    }
  });
}

Tensor weighted_sum_forward(const Tensor& x, const Tensor& w, const Tensor& src, const Tensor& dst, int64_t n) {
  TORCH_CHECK(x.device().is_cpu() && x.dim() == 2 && x.is_contiguous(), "x must be a contiguous CPU [N, d] tensor");
  TORCH_CHECK(w.is_contiguous() && w.numel() == src.numel() && w.scalar_type() == x.scalar_type(), "bad weights");
  check_edges(src, dst);
  Tensor out = at::empty({n, x.size(1)}, x.options());  // zeroed or overwritten by the impl
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "weighted_sum_forward",
                             [&] { weighted_sum_forward_impl<scalar_t>(x, w, src, dst, out); });
  return out;
}

// gradients (x, w); an unneeded one comes back as an empty tensor
std::tuple<Tensor, Tensor> weighted_sum_backward(const Tensor& g_out, const Tensor& x, const Tensor& w,
                                                 const Tensor& src, const Tensor& dst, bool need_x, bool need_w) {
  TORCH_CHECK(g_out.is_contiguous() && g_out.dim() == 2 && g_out.size(1) == x.size(1) &&
                  g_out.scalar_type() == x.scalar_type(), "bad output gradient");
  check_edges(src, dst);
  Tensor g_x = need_x ? at::empty_like(x) : Tensor();  // zeroed or overwritten by the impl
  Tensor g_w = need_w ? at::empty_like(w) : Tensor();
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "weighted_sum_backward",
                             [&] { weighted_sum_backward_impl<scalar_t>(g_out, x, w, src, dst, g_x, g_w); });
  return {g_x.defined() ? g_x : at::empty({0}, x.options()), g_w.defined() ? g_w : at::empty({0}, x.options())};
}

// Dropout of the node updates: out[r, j] = x[r, j] * keep(seed, r, j) * scale, keep as in the link MLP (a hash of the
// row and unit, no generator state); the backward recomputes the mask, so nothing is kept between the passes.
// Rows of `cols` entries (the last dimension); parallel over rows, the same mask on any number of threads.
template <typename scalar_t>
void hash_dropout_impl(const scalar_t* xp, scalar_t* op, int64_t rows, int64_t cols, uint32_t thr, uint64_t seed,
                       scalar_t sc) {
  at::parallel_for(0, rows, 2048, [&](int64_t r0, int64_t r1) {
    std::vector<scalar_t> keep(cols);
    for (int64_t r = r0; r < r1; ++r) {
      keep_mask(seed, r, cols, thr, keep.data());
      const scalar_t* __restrict xr = xp + r * cols;
      scalar_t* __restrict o = op + r * cols;
      const scalar_t* __restrict kp = keep.data();
#pragma omp simd
      for (int64_t j = 0; j < cols; ++j) o[j] = xr[j] * (kp[j] * sc);
    }
  });
}

Tensor hash_dropout(const Tensor& x, int64_t threshold, int64_t seed, double scale) {
  TORCH_CHECK(x.device().is_cpu() && x.is_contiguous() && x.dim() >= 1, "x must be a contiguous CPU tensor");
  Tensor out = at::empty_like(x);
  const int64_t cols = x.size(-1), rows = cols ? x.numel() / cols : 0;
  // bf16 / fp16 too (autocast): the same mask in every precision
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, x.scalar_type(), "hash_dropout", [&] {
    hash_dropout_impl<scalar_t>(x.data_ptr<scalar_t>(), out.data_ptr<scalar_t>(), rows, cols,
                                static_cast<uint32_t>(threshold), static_cast<uint64_t>(seed),
                                static_cast<scalar_t>(scale));
  });
  return out;
}

}  // namespace

TORCH_LIBRARY(gcad_native, m) {
  m.def("link_mlp_forward(Tensor h, Tensor? ud, Tensor? us, Tensor w1, Tensor w2s, Tensor src, Tensor dst, "
        "int threshold, int seed, int block, bool save) -> (Tensor, Tensor)");
  m.def("link_mlp_backward(Tensor g_out, Tensor h, Tensor? ud, Tensor? us, Tensor w1, Tensor w2s, float scale, "
        "Tensor src, Tensor dst, Tensor bits, int block, bool need_h, bool need_ud, bool need_us, "
        "bool need_w1, bool need_w2, int chunk_edges=0) -> (Tensor, Tensor, Tensor, Tensor, Tensor)");
  m.def("weighted_sum_forward(Tensor x, Tensor w, Tensor src, Tensor dst, int n) -> Tensor");
  m.def("hash_dropout(Tensor x, int threshold, int seed, float scale) -> Tensor");
  m.def("weighted_sum_backward(Tensor g_out, Tensor x, Tensor w, Tensor src, Tensor dst, bool need_x, bool need_w) "
        "-> (Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(gcad_native, CPU, m) {
  m.impl("link_mlp_forward", &link_mlp_forward);
  m.impl("link_mlp_backward", &link_mlp_backward);
  m.impl("weighted_sum_forward", &weighted_sum_forward);
  m.impl("hash_dropout", &hash_dropout);
  m.impl("weighted_sum_backward", &weighted_sum_backward);
}
