// CUDA GEMM (kernels/cuda/matmul.cu, cuBLAS) against float64 references computed here and
// against the CPU twin, through both matmul() (NumPy shape rules, transposed views passed as
// trans flags) and gemm() (alpha, beta, explicit trans flags, shared b).
//
// Tolerance of out[i, j] = sum_k a[i, k] b[k, j]: accumulation in f32 (f16/bf16/f32 inputs, no
// TF32) or f64 is allowed loose_tol(acc) * ||(a[i, k] b[k, j])_k||_2 (loose_tol_sum(acc, K) times the rms of
// the products), plus one rounding of the result in the output dtype, loose_tol(out) * |ref|.
#include <catch2/catch.hpp>

#include <cmath>
#include <tuple>
#include <vector>

#include <ember/core/device.h>
#include <ember/core/stream.h>
#include <ember/kernels/matmul.h>
#include "support/reference.h"

using namespace ember;
using namespace ember::testing;

namespace {

const Device kGpu = Device::cuda(0);

struct GemmRef {
  std::vector<double> out;  // (batch, M, N) row-major
  std::vector<double> bound;  // per element
};

/// out[b] = alpha * a[b] @ b[b or 0] + beta * c0[b] in float64. av: (batch, M, K) logical values,
/// bv: (batch or 1, K, N), c0: (batch, M, N) or empty when beta == 0.
GemmRef ref_gemm(const std::vector<double>& av, const std::vector<double>& bv, const std::vector<double>& c0,
                 int64_t batch, int64_t M, int64_t K, int64_t N, bool b_shared, double alpha, double beta, DType dt) {
  GemmRef r;
  r.out.assign(static_cast<size_t>(batch * M * N), 0.0);
  r.bound.assign(r.out.size(), 0.0);
  const double ta = loose_tol(acc_of(dt)), to = loose_tol(dt);
  for (int64_t b = 0; b < batch; ++b) {
    const double* A = av.data() + b * M * K;
    const double* B = bv.data() + (b_shared ? 0 : b * K * N);
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double s = 0.0, sq = 0.0;
        for (int64_t k = 0; k < K; ++k) {
          const double p = A[i * K + k] * B[k * N + j];
          s += p;
          sq += p * p;
        }
        const size_t o = static_cast<size_t>((b * M + i) * N + j);
        const double c = beta != 0.0 ? beta * c0[o] : 0.0;
        r.out[o] = alpha * s + c;
        r.bound[o] = ta * (std::fabs(alpha) * std::sqrt(sq) + std::fabs(c)) + to * std::fabs(r.out[o]);
      }
  }
  return r;
}

void check_bound(const std::vector<double>& got, const GemmRef& ref, double slack, const char* what) {
  REQUIRE(got.size() == ref.out.size());
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double bound = slack * ref.bound[i];
    if (!(std::fabs(got[i] - ref.out[i]) <= bound) && bad++ < 5)
      UNSCOPED_INFO(what << " [" << i << "] got " << got[i] << " expected " << ref.out[i] << " bound " << bound);
  }
  CHECK(bad == 0);
}

/// The row-major values of the (batch, rows, cols) matrices behind `t` (any layout), and the
/// values of its transpose in the last two dims when `transpose`.
std::vector<double> values(const Tensor& t, bool transpose = false) {
  std::vector<double> v = to_f64(t);
  if (!transpose) return v;
  const int64_t r = t.size(-2), c = t.size(-1), nb = t.numel() / (r * c);
  std::vector<double> out(v.size());
  for (int64_t b = 0; b < nb; ++b)
    for (int64_t i = 0; i < r; ++i)
      for (int64_t j = 0; j < c; ++j) out[(b * c + j) * r + i] = v[(b * r + i) * c + j];
  return out;
}

/// matmul(a, b) on the GPU vs the reference and the CPU twin, for 2-D or 3-D a and b where a's
/// batch (if any) is the result's batch and b is 2-D or has the same batch.
void check_matmul(const Tensor& ac, const Tensor& ag, const Tensor& bc, const Tensor& bg) {
  const int64_t batch = ac.dim() == 3 ? ac.size(0) : (bc.dim() == 3 ? bc.size(0) : 1);
  const int64_t M = ac.size(-2), K = ac.size(-1), N = bc.size(-1);
  INFO("matmul " << ac.shape_str() << " @ " << bc.shape_str() << " " << dtype_name(ac.dtype()) << ", gpu strides "
                 << shape_str(ag.strides()) << " and " << shape_str(bg.strides()));
  std::vector<double> av = values(ac);
  if (ac.dim() == 2 && batch > 1) {  // a shared by a batched b: repeat it per batch
    std::vector<double> rep;
    for (int64_t b = 0; b < batch; ++b) rep.insert(rep.end(), av.begin(), av.end());
    av = rep;
  }
  const GemmRef ref = ref_gemm(av, values(bc), {}, batch, M, K, N, bc.dim() == 2, 1.0, 0.0, ac.dtype());
  Tensor og = kernels::matmul(ag, bg);
  REQUIRE(og.device() == kGpu);
  CHECK(og.dtype() == ac.dtype());
  CHECK(og.size(-2) == M);
  CHECK(og.size(-1) == N);
  const std::vector<double> got = to_f64(og);
  check_bound(got, ref, 1.0, "cuda vs f64 reference:");
  GemmRef cpu = ref;
  cpu.out = to_f64(kernels::matmul(ac, bc));
  check_bound(got, cpu, 2.0, "cuda vs cpu twin:");
}

const DType kFloatTypes[] = {DType::f32, DType::f64, DType::f16, DType::bf16};

}  // namespace

TEST_CASE("cuda matmul: odd 2-D shapes in every layout and float dtype", "[cuda][matmul]") {
  const Layout layouts[] = {Layout::Contiguous, Layout::Transposed, Layout::Strided};
  for (DType dt : kFloatTypes) {
    for (Layout la : layouts)
      for (Layout lb : layouts) {
        Tensor ac = random_tensor({37, 61}, dt, 1, -1.0, 1.0, la);
        Tensor ag = random_tensor({37, 61}, dt, 1, -1.0, 1.0, la, kGpu);
        Tensor bc = random_tensor({61, 29}, dt, 2, -1.0, 1.0, lb);
        Tensor bg = random_tensor({61, 29}, dt, 2, -1.0, 1.0, lb, kGpu);
        check_matmul(ac, ag, bc, bg);
      }
    // Degenerate widths: a row vector, a column result, K = 1.
    for (auto [M, K, N] : {std::tuple<int64_t, int64_t, int64_t>{1, 17, 5}, {9, 17, 1}, {13, 1, 11}}) {
      Tensor ac = random_tensor({M, K}, dt, 3, -1.0, 1.0);
      Tensor bc = random_tensor({K, N}, dt, 4, -1.0, 1.0, Layout::Transposed);
      check_matmul(ac, ac.to(kGpu), bc, random_tensor({K, N}, dt, 4, -1.0, 1.0, Layout::Transposed, kGpu));
    }
  }
}

TEST_CASE("cuda matmul: batched, shared b (folded into M), transposed a with shared b", "[cuda][matmul]") {
  for (DType dt : kFloatTypes) {
    // Both batched.
    Tensor ac = random_tensor({3, 37, 61}, dt, 5, -1.0, 1.0);
    Tensor bc = random_tensor({3, 61, 29}, dt, 6, -1.0, 1.0, Layout::Transposed);
    check_matmul(ac, ac.to(kGpu), bc, random_tensor({3, 61, 29}, dt, 6, -1.0, 1.0, Layout::Transposed, kGpu));
    // b shared, a row-major: one GEMM with M = 3 * 37.
    Tensor b2 = random_tensor({61, 29}, dt, 7, -1.0, 1.0);
    check_matmul(ac, ac.to(kGpu), b2, b2.to(kGpu));
    // b shared, a transposed in memory: a strided-batched GEMM with b's stride 0.
    Tensor at = random_tensor({3, 37, 61}, dt, 8, -1.0, 1.0, Layout::Transposed);
    Tensor atg = random_tensor({3, 37, 61}, dt, 8, -1.0, 1.0, Layout::Transposed, kGpu);
    check_matmul(at, atg, b2, b2.to(kGpu));
    Tensor b2t = random_tensor({61, 29}, dt, 9, -1.0, 1.0, Layout::Transposed);
    check_matmul(at, atg, b2t, random_tensor({61, 29}, dt, 9, -1.0, 1.0, Layout::Transposed, kGpu));
    // a shared, b batched (the front computes the transpose product).
    Tensor a2 = random_tensor({37, 61}, dt, 10, -1.0, 1.0);
    check_matmul(a2, a2.to(kGpu), bc, random_tensor({3, 61, 29}, dt, 6, -1.0, 1.0, Layout::Transposed, kGpu));
  }
}

TEST_CASE("cuda matmul: 1-D operands and broadcast batch dims", "[cuda][matmul]") {
  Tensor v = random_tensor({61}, DType::f32, 11, -1.0, 1.0);
  Tensor m = random_tensor({61, 29}, DType::f32, 12, -1.0, 1.0);
  Tensor vm = kernels::matmul(v.to(kGpu), m.to(kGpu));
  CHECK(vm.sizes() == Shape{29});
  const GemmRef r1 = ref_gemm(to_f64(v), to_f64(m), {}, 1, 1, 61, 29, true, 1.0, 0.0, DType::f32);
  check_bound(to_f64(vm), r1, 1.0, "vector @ matrix:");
  Tensor w = random_tensor({29}, DType::f32, 13, -1.0, 1.0);
  Tensor mw = kernels::matmul(m.to(kGpu), w.to(kGpu));
  CHECK(mw.sizes() == Shape{61});
  const GemmRef r2 = ref_gemm(to_f64(m), to_f64(w), {}, 1, 61, 29, 1, true, 1.0, 0.0, DType::f32);
  check_bound(to_f64(mw), r2, 1.0, "matrix @ vector:");
  // (2, 1, 5, 7) @ (3, 7, 4) -> (2, 3, 5, 4); compared with the CPU twin (same shape rules).
  Tensor a4 = random_tensor({2, 1, 5, 7}, DType::f32, 14, -1.0, 1.0);
  Tensor b3 = random_tensor({3, 7, 4}, DType::f32, 15, -1.0, 1.0);
  Tensor o4 = kernels::matmul(a4.to(kGpu), b3.to(kGpu));
  CHECK(o4.sizes() == Shape{2, 3, 5, 4});
  check_close(o4, to_f64(kernels::matmul(a4, b3)), 2 * loose_tol(DType::f32), 2 * loose_tol_sum(DType::f32, 7));
}

TEST_CASE("cuda gemm: alpha, beta, every trans combination, shared b", "[cuda][matmul]") {
  const int64_t B = 3, M = 23, K = 45, N = 19;
  for (DType dt : kFloatTypes)
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (int64_t bb : {B, int64_t{1}}) {
          INFO(dtype_name(dt) << " trans_a " << ta << " trans_b " << tb << " b batch " << bb);
          const Shape a_shape = ta ? Shape{B, K, M} : Shape{B, M, K};
          const Shape b_shape = tb ? Shape{bb, N, K} : Shape{bb, K, N};
          Tensor ac = random_tensor(a_shape, dt, 20, -1.0, 1.0);
          Tensor bc = random_tensor(b_shape, dt, 21, -1.0, 1.0);
          Tensor oc = random_tensor({B, M, N}, dt, 22, -1.0, 1.0);
          const double alpha = 0.75, beta = -1.5;
          Tensor og = oc.to(kGpu).clone();
          kernels::gemm(ac.to(kGpu), bc.to(kGpu), og, ta, tb, alpha, beta);
          const GemmRef ref =
              ref_gemm(values(ac, ta), values(bc, tb), to_f64(oc), B, M, K, N, bb == 1, alpha, beta, dt);
          const std::vector<double> got = to_f64(og);
          check_bound(got, ref, 1.0, "cuda vs f64 reference:");
          Tensor occ = oc.clone();
          kernels::gemm(ac, bc, occ, ta, tb, alpha, beta);
          GemmRef cpu = ref;
          cpu.out = to_f64(occ);
          check_bound(got, cpu, 2.0, "cuda vs cpu twin:");
        }
}

TEST_CASE("cuda gemm: K = 0 scales out by beta; empty results", "[cuda][matmul]") {
  for (DType dt : kFloatTypes) {
    // Straight to the implementation (the gemm() front refuses these empty operands as
    // non-contiguous, see Tensor::is_contiguous).
    Tensor a = empty({2, 5, 0}, {.dtype = dt, .device = kGpu});
    Tensor b = empty({2, 0, 4}, {.dtype = dt, .device = kGpu});
    Tensor oc = random_tensor({2, 5, 4}, dt, 30, -1.0, 1.0);
    Tensor og = oc.to(kGpu).clone();
    kernels::gemm_table(kGpu, a, b, og, false, false, 1.0, 0.5);
    std::vector<double> expect = to_f64(oc);
    for (double& e : expect) e = round_to(dt, 0.5 * e);  // what one rounding of 0.5 * e gives
    CHECK(to_f64(og) == expect);
    Tensor og2 = og.clone();
    kernels::gemm_table(kGpu, a, b, og2, false, false, 1.0, 0.0);
    CHECK(to_f64(og2) == std::vector<double>(40, 0.0));
    CHECK(to_f64(kernels::matmul(empty({5, 0}, {.dtype = dt, .device = kGpu}),
                                 empty({0, 4}, {.dtype = dt, .device = kGpu}))) == std::vector<double>(20, 0.0));
    CHECK(kernels::matmul(empty({0, 3}, {.dtype = dt, .device = kGpu}), empty({3, 4}, {.dtype = dt, .device = kGpu}))
              .sizes() == Shape{0, 4});
  }
}

TEST_CASE("cuda matmul: larger products, f32 stays f32-accurate (no TF32)", "[cuda][matmul][slow]") {
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    Tensor ac = random_tensor({257, 1031}, dt, 40, -1.0, 1.0);
    Tensor bc = random_tensor({1031, 383}, dt, 41, -1.0, 1.0, Layout::Transposed);
    check_matmul(ac, ac.to(kGpu), bc, random_tensor({1031, 383}, dt, 41, -1.0, 1.0, Layout::Transposed, kGpu));
  }
}

TEST_CASE("cuda gemm: more batches than one cuBLAS call takes", "[cuda][matmul]") {
  // 65537 batches of (2, 3) @ (3, 2): the launcher splits the batch into chunks.
  const int64_t B = 65537;
  Tensor ac = random_tensor({B, 2, 3}, DType::f32, 50, -1.0, 1.0);
  Tensor bc = random_tensor({B, 3, 2}, DType::f32, 51, -1.0, 1.0);
  Tensor og = empty({B, 2, 2}, {.dtype = DType::f32, .device = kGpu});
  kernels::gemm(ac.to(kGpu), bc.to(kGpu), og, false, false);
  const GemmRef ref = ref_gemm(to_f64(ac), to_f64(bc), {}, B, 2, 3, 2, false, 1.0, 0.0, DType::f32);
  check_bound(to_f64(og), ref, 1.0, "chunked batch:");
}

TEST_CASE("cuda matmul: on a side stream (a cuBLAS handle per stream)", "[cuda][matmul]") {
  Tensor ac = random_tensor({64, 33}, DType::f32, 60, -1.0, 1.0);
  Tensor bc = random_tensor({33, 17}, DType::f32, 61, -1.0, 1.0);
  Tensor ag = ac.to(kGpu), bg = bc.to(kGpu);
  Tensor on_default = kernels::matmul(ag, bg);
  Stream side = new_stream(kGpu);
  Tensor on_side;
  {
    StreamGuard guard(side);
    on_side = kernels::matmul(ag, bg);
    side.synchronize();
  }
  CHECK(to_f64(on_side) == to_f64(on_default));
  const GemmRef ref = ref_gemm(to_f64(ac), to_f64(bc), {}, 1, 64, 33, 17, true, 1.0, 0.0, DType::f32);
  check_bound(to_f64(on_side), ref, 1.0, "side stream:");
}
