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
//
// All loops are serial (one thread): the kernels are meant for single-threaded workers.

#include <ATen/ATen.h>
#if defined(__AVX512F__)
#include <immintrin.h>
#endif
#include <ATen/Dispatch.h>
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

// per-node term: [N, h] (row stride h), [h] (one vector for every edge: row stride 0) or absent
struct NodeTerm {
  const void* ptr = nullptr;
  int64_t stride = 0;
};

NodeTerm node_term(const std::optional<Tensor>& t, int64_t h) {
  NodeTerm r;
  if (t.has_value() && t->defined()) {
    TORCH_CHECK(t->is_contiguous() && (t->dim() == 1 || t->dim() == 2) && t->size(-1) == h, "bad per-node term");
    r.ptr = t->data_ptr();
    r.stride = t->dim() == 2 ? h : 0;
  }
  return r;
}

// |h[d] - h[s]| into a, h[d] - h[s] into diff (when given), for edges lo .. lo + rows
template <typename scalar_t>
inline void gather_abs_diff(const scalar_t* __restrict hp, const int64_t* __restrict sp, const int64_t* __restrict dp,
                            int64_t lo, int64_t rows, int64_t h, scalar_t* __restrict a, scalar_t* __restrict diff) {
  for (int64_t b = 0; b < rows; ++b) {
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
  for (; j < h; ++j) out[j] = ((words[j >> 6] >> (j & 63)) & 1) ? g : scalar_t(0);
}

// Forward: logits, and (when `bits` is given) the mask m_e[j] = [ReLU(z_e)[j] * keep_e[j] > 0] as bits, the
// only per-edge state the backward pass needs besides the indices (h / 8 bytes per edge).
template <typename scalar_t>
void link_mlp_forward_impl(const Tensor& h, NodeTerm ud, NodeTerm us, const Tensor& w1, const Tensor& w2s,
                           const Tensor& src, const Tensor& dst, int64_t threshold, int64_t seed, int64_t block,
                           Tensor& out, uint64_t* bits) {
  const int64_t e_total = src.numel(), k = h.size(1), words = (k + 63) / 64;
  const scalar_t* hp = h.data_ptr<scalar_t>();
  const scalar_t* w1p = w1.data_ptr<scalar_t>();
  const scalar_t* w2p = w2s.data_ptr<scalar_t>();
  const int64_t* sp = src.data_ptr<int64_t>();
  const int64_t* dp = dst.data_ptr<int64_t>();
  const scalar_t* udp = static_cast<const scalar_t*>(ud.ptr);
  const scalar_t* usp = static_cast<const scalar_t*>(us.ptr);
  scalar_t* op = out.data_ptr<scalar_t>();
  const bool drop = threshold > 0;
  const uint32_t thr = static_cast<uint32_t>(threshold);
  std::vector<scalar_t> abuf(block * k), zbuf(block * k), keep(k, scalar_t(1)), zero(k, scalar_t(0));
  // an absent term reads a row of zeros (branch-free inner loop)
  if (udp == nullptr) udp = zero.data(), ud.stride = 0;
  if (usp == nullptr) usp = zero.data(), us.stride = 0;
  for (int64_t lo = 0; lo < e_total; lo += block) {
    const int64_t rows = std::min(block, e_total - lo);
    gather_abs_diff(hp, sp, dp, lo, rows, k, abuf.data(), static_cast<scalar_t*>(nullptr));
    gemm_rm<scalar_t>(false, true, rows, k, k, 1, abuf.data(), k, w1p, k, 0, zbuf.data(), k);
    for (int64_t b = 0; b < rows; ++b) {
      const int64_t e = lo + b;
      scalar_t* __restrict z = zbuf.data() + b * k;
      const scalar_t* __restrict u1 = udp + dp[e] * ud.stride;
      const scalar_t* __restrict u2 = usp + sp[e] * us.stride;
      if (drop) keep_mask(static_cast<uint64_t>(seed), e, k, thr, keep.data());
      const scalar_t* __restrict kp = keep.data();
      scalar_t acc = 0;
#pragma omp simd reduction(+ : acc)
      for (int64_t j = 0; j < k; ++j) {
        scalar_t v = z[j] + u1[j] + u2[j];
        v = v > 0 ? v * kp[j] : scalar_t(0);
        z[j] = v;
        acc += v * w2p[j];
      }
      op[e] = acc;
      if (bits != nullptr) pack_positive(z, k, bits + e * words);
    }
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
void link_mlp_backward_impl(const Tensor& g_out, const Tensor& h, NodeTerm ud, NodeTerm us, const Tensor& w1,
                            const Tensor& w2s, double scale, const Tensor& src, const Tensor& dst, const uint64_t* bits,
                            int64_t block, Tensor& g_h, Tensor& g_ud, Tensor& g_us, Tensor& g_w1, Tensor& g_w2) {
  const int64_t e_total = src.numel(), k = h.size(1), words = (k + 63) / 64, n = h.size(0);
  const scalar_t* gp = g_out.data_ptr<scalar_t>();
  const scalar_t* hp = h.data_ptr<scalar_t>();
  const scalar_t* w1p = w1.data_ptr<scalar_t>();
  const scalar_t* w2p = w2s.data_ptr<scalar_t>();
  const int64_t* sp = src.data_ptr<int64_t>();
  const int64_t* dp = dst.data_ptr<int64_t>();
  const scalar_t* udp = static_cast<const scalar_t*>(ud.ptr);
  const scalar_t* usp = static_cast<const scalar_t*>(us.ptr);
  scalar_t* ghp = g_h.defined() ? g_h.data_ptr<scalar_t>() : nullptr;
  const bool need_m = g_w1.defined() || g_w2.defined(), need_w2 = g_w2.defined();
  // per-node sums of G^ (into the gradient tensor when it is wanted, else a scratch buffer)
  const bool want_pd = udp && (g_ud.defined() || need_w2), want_ps = usp && (g_us.defined() || need_w2);
  const int64_t rows_d = ud.stride ? n : 1, rows_s = us.stride ? n : 1;
  Tensor pd_t = want_pd ? (g_ud.defined() ? g_ud : at::zeros({rows_d, k}, h.options())) : Tensor();
  Tensor ps_t = want_ps ? (g_us.defined() ? g_us : at::zeros({rows_s, k}, h.options())) : Tensor();
  scalar_t* pdp = want_pd ? pd_t.data_ptr<scalar_t>() : nullptr;
  scalar_t* psp = want_ps ? ps_t.data_ptr<scalar_t>() : nullptr;
  // W1 with row j scaled by w2s[j]: dz_e W1 = G^_e (diag(w2s) W1)
  std::vector<scalar_t> w1s(k * k), m(k * k, scalar_t(0));
  for (int64_t j = 0; j < k; ++j)
    for (int64_t i = 0; i < k; ++i) w1s[j * k + i] = w2p[j] * w1p[j * k + i];
  std::vector<scalar_t> abuf(block * k), dbuf(ghp ? block * k : 0), gbuf(block * k), gabuf(ghp ? block * k : 0);
  for (int64_t lo = 0; lo < e_total; lo += block) {
    const int64_t rows = std::min(block, e_total - lo);
    if (need_m || ghp)
      gather_abs_diff(hp, sp, dp, lo, rows, k, abuf.data(), ghp ? dbuf.data() : static_cast<scalar_t*>(nullptr));
    for (int64_t b = 0; b < rows; ++b) {
      const int64_t e = lo + b;
      scalar_t* __restrict gh = gbuf.data() + b * k;
      unpack_scaled(bits + e * words, k, gp[e], gh);
      if (pdp) {
        scalar_t* __restrict o = pdp + dp[e] * ud.stride;
#pragma omp simd
        for (int64_t j = 0; j < k; ++j) o[j] += gh[j];
      }
      if (psp) {
        scalar_t* __restrict o = psp + sp[e] * us.stride;
#pragma omp simd
        for (int64_t j = 0; j < k; ++j) o[j] += gh[j];
      }
    }
    if (need_m) gemm_rm<scalar_t>(true, false, k, k, rows, 1, gbuf.data(), k, abuf.data(), k, 1, m.data(), k);
    if (ghp) {
      gemm_rm<scalar_t>(false, false, rows, k, k, 1, gbuf.data(), k, w1s.data(), k, 0, gabuf.data(), k);
      for (int64_t b = 0; b < rows; ++b) {
        const scalar_t* __restrict ga = gabuf.data() + b * k;
        const scalar_t* __restrict df = dbuf.data() + b * k;
        scalar_t* __restrict od = ghp + dp[lo + b] * k;
#pragma omp simd
        for (int64_t j = 0; j < k; ++j) od[j] += df[j] > 0 ? ga[j] : (df[j] < 0 ? -ga[j] : scalar_t(0));
        scalar_t* __restrict os = ghp + sp[lo + b] * k;
#pragma omp simd
        for (int64_t j = 0; j < k; ++j) os[j] -= df[j] > 0 ? ga[j] : (df[j] < 0 ? -ga[j] : scalar_t(0));
      }
    }
  }
  if (need_w2) {
    std::vector<scalar_t> acc(k, scalar_t(0));
    for (int64_t j = 0; j < k; ++j)
      for (int64_t i = 0; i < k; ++i) acc[j] += w1p[j * k + i] * m[j * k + i];
    for (int64_t r = 0; pdp && r < rows_d; ++r)
      for (int64_t j = 0; j < k; ++j) acc[j] += udp[r * k + j] * pdp[r * k + j];
    for (int64_t r = 0; psp && r < rows_s; ++r)
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
    if (!g->defined()) continue;
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
    link_mlp_forward_impl<scalar_t>(h, tu, ts, w1, w2s, src, dst, threshold, seed, block, out, bp);
  });
  return {out, bits};
}

// gradients (h, ud, us, w1, w2); an unneeded one comes back as an empty tensor
std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor> link_mlp_backward(
    const Tensor& g_out, const Tensor& h, const std::optional<Tensor>& ud, const std::optional<Tensor>& us,
    const Tensor& w1, const Tensor& w2s, double scale, const Tensor& src, const Tensor& dst, const Tensor& bits,
    int64_t block, bool need_h, bool need_ud, bool need_us, bool need_w1, bool need_w2) {
  check_link_inputs(h, w1, w2s, src, dst);
  TORCH_CHECK(block > 0, "block must be positive");
  TORCH_CHECK(g_out.is_contiguous() && g_out.numel() == src.numel() && g_out.scalar_type() == h.scalar_type(),
              "bad output gradient");
  const int64_t k = h.size(1);
  TORCH_CHECK(bits.scalar_type() == at::kLong && bits.is_contiguous() && bits.dim() == 2 &&
                  bits.size(0) == src.numel() && bits.size(1) == (k + 63) / 64,
              "bad mask bits (forward run without save?)");
  NodeTerm tu = node_term(ud, k), ts = node_term(us, k);
  Tensor g_h = need_h ? at::zeros_like(h) : Tensor();
  Tensor g_ud = (need_ud && tu.ptr) ? at::zeros_like(*ud) : Tensor();
  Tensor g_us = (need_us && ts.ptr) ? at::zeros_like(*us) : Tensor();
  Tensor g_w1 = need_w1 ? at::empty_like(w1) : Tensor();
  Tensor g_w2 = need_w2 ? at::empty_like(w2s) : Tensor();
  const uint64_t* bp = reinterpret_cast<const uint64_t*>(bits.data_ptr<int64_t>());
  AT_DISPATCH_FLOATING_TYPES(h.scalar_type(), "link_mlp_backward", [&] {
    link_mlp_backward_impl<scalar_t>(g_out, h, tu, ts, w1, w2s, scale, src, dst, bp, block, g_h, g_ud, g_us, g_w1,
                                     g_w2);
  });
  auto or_empty = [&](const Tensor& t) { return t.defined() ? t : at::empty({0}, h.options()); };
  return {or_empty(g_h), or_empty(g_ud), or_empty(g_us), or_empty(g_w1), or_empty(g_w2)};
}

template <typename scalar_t>
void weighted_sum_forward_impl(const Tensor& x, const Tensor& w, const Tensor& src, const Tensor& dst, Tensor& out) {
  const int64_t e_total = src.numel(), k = x.size(1);
  const scalar_t* xp = x.data_ptr<scalar_t>();
  const scalar_t* wp = w.data_ptr<scalar_t>();
  const int64_t* sp = src.data_ptr<int64_t>();
  const int64_t* dp = dst.data_ptr<int64_t>();
  scalar_t* op = out.data_ptr<scalar_t>();
  for (int64_t e = 0; e < e_total; ++e) {
    const scalar_t we = wp[e];
    if (we == scalar_t(0)) continue;  // removed edge: would add exactly 0 (finite x)
    const scalar_t* __restrict xs = xp + sp[e] * k;
    scalar_t* __restrict o = op + dp[e] * k;
#pragma omp simd
    for (int64_t j = 0; j < k; ++j) o[j] += we * xs[j];
  }
}

template <typename scalar_t>
void weighted_sum_backward_impl(const Tensor& g_out, const Tensor& x, const Tensor& w, const Tensor& src,
                                const Tensor& dst, Tensor& g_x, Tensor& g_w) {
  const int64_t e_total = src.numel(), k = x.size(1);
  const scalar_t* gp = g_out.data_ptr<scalar_t>();
  const scalar_t* xp = x.data_ptr<scalar_t>();
  const scalar_t* wp = w.data_ptr<scalar_t>();
  const int64_t* sp = src.data_ptr<int64_t>();
  const int64_t* dp = dst.data_ptr<int64_t>();
  scalar_t* gxp = g_x.defined() ? g_x.data_ptr<scalar_t>() : nullptr;
  scalar_t* gwp = g_w.defined() ? g_w.data_ptr<scalar_t>() : nullptr;
  for (int64_t e = 0; e < e_total; ++e) {
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

Tensor weighted_sum_forward(const Tensor& x, const Tensor& w, const Tensor& src, const Tensor& dst, int64_t n) {
  TORCH_CHECK(x.device().is_cpu() && x.dim() == 2 && x.is_contiguous(), "x must be a contiguous CPU [N, d] tensor");
  TORCH_CHECK(w.is_contiguous() && w.numel() == src.numel() && w.scalar_type() == x.scalar_type(), "bad weights");
  check_edges(src, dst);
  Tensor out = at::zeros({n, x.size(1)}, x.options());
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
  Tensor g_x = need_x ? at::zeros_like(x) : Tensor();
  Tensor g_w = need_w ? at::empty_like(w) : Tensor();
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "weighted_sum_backward",
                             [&] { weighted_sum_backward_impl<scalar_t>(g_out, x, w, src, dst, g_x, g_w); });
  return {g_x.defined() ? g_x : at::empty({0}, x.options()), g_w.defined() ? g_w : at::empty({0}, x.options())};
}

}  // namespace

TORCH_LIBRARY(gcad_native, m) {
  m.def("link_mlp_forward(Tensor h, Tensor? ud, Tensor? us, Tensor w1, Tensor w2s, Tensor src, Tensor dst, "
        "int threshold, int seed, int block, bool save) -> (Tensor, Tensor)");
  m.def("link_mlp_backward(Tensor g_out, Tensor h, Tensor? ud, Tensor? us, Tensor w1, Tensor w2s, float scale, "
        "Tensor src, Tensor dst, Tensor bits, int block, bool need_h, bool need_ud, bool need_us, "
        "bool need_w1, bool need_w2) -> (Tensor, Tensor, Tensor, Tensor, Tensor)");
  m.def("weighted_sum_forward(Tensor x, Tensor w, Tensor src, Tensor dst, int n) -> Tensor");
  m.def("weighted_sum_backward(Tensor g_out, Tensor x, Tensor w, Tensor src, Tensor dst, bool need_x, bool need_w) "
        "-> (Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(gcad_native, CPU, m) {
  m.impl("link_mlp_forward", &link_mlp_forward);
  m.impl("link_mlp_backward", &link_mlp_backward);
  m.impl("weighted_sum_forward", &weighted_sum_forward);
  m.impl("weighted_sum_backward", &weighted_sum_backward);
}
