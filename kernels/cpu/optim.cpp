// CPU twins of the fused optimizer kernels (kernels/optim.h): SGD, Adam/AdamW, the global L2
// norm and norm clipping.
//
// Every tensor of a call is cut into chunks of kChunk elements and the whole list of chunks is
// spread over the thread pool, so a model with one huge and many tiny parameters keeps all cores
// busy. The norm sums each chunk in double into its own slot and folds the slots in a fixed order,
// so the result does not depend on the thread count. Element formulas: kernels/optim_math.h.
#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include <ember/core/thread_pool.h>
#include <ember/kernels/cpu/cpu_kernels.h>
#include <ember/kernels/optim.h>
#include <ember/kernels/optim_math.h>

namespace ember::kernels::cpu {
namespace {

constexpr int64_t kChunk = 32768;

struct Chunk {
  size_t index;  // which tensor / slot
  int64_t begin, end;
};

std::vector<Chunk> make_chunks(const std::vector<int64_t>& numels) {
  std::vector<Chunk> chunks;
  for (size_t i = 0; i < numels.size(); ++i)
    for (int64_t b = 0; b < numels[i]; b += kChunk) chunks.push_back({i, b, std::min(numels[i], b + kChunk)});
  return chunks;
}

template <typename Fn> void for_chunks(const std::vector<Chunk>& chunks, const Fn& fn) {
  parallel_for(0, static_cast<int64_t>(chunks.size()), 1, [&](int64_t b, int64_t e) {
    for (int64_t c = b; c < e; ++c) fn(chunks[static_cast<size_t>(c)]);
  });
}

/// Math type of an element type: double for f64, float otherwise.
template <typename T> using math_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

/// Calls fn<P, G>() for the (param, grad) dtype pair of a group.
template <typename Fn> void dispatch_pair(DType p, DType g, const char* op, const Fn& fn) {
  if (p == DType::f64 && g == DType::f64) return fn.template operator()<double, double>();
  if (p == DType::f32) {
    if (g == DType::f32) return fn.template operator()<float, float>();
    if (g == DType::f16) return fn.template operator()<float, Half>();
    if (g == DType::bf16) return fn.template operator()<float, BFloat16>();
  }
  EMBER_FAIL(op, " (cpu): unsupported parameter/gradient dtypes ", dtype_name(p), "/", dtype_name(g));
}

template <typename P, typename G> void sgd_typed(const std::vector<SgdSlot>& slots, const SgdHyper& h) {
  const auto c = optim_math::sgd_coeffs<P>(h);
  std::vector<int64_t> numels;
  for (const SgdSlot& s : slots) numels.push_back(s.param.numel());
  for_chunks(make_chunks(numels), [&](const Chunk& ch) {
    const SgdSlot& s = slots[ch.index];
    P* p = static_cast<P*>(s.param.data_ptr());
    const G* g = static_cast<const G*>(s.grad.data_ptr());
    if (c.use_momentum) {
      P* buf = static_cast<P*>(s.momentum_buffer.data_ptr());
      for (int64_t i = ch.begin; i < ch.end; ++i)
        optim_math::sgd_update<P>(p[i], static_cast<P>(g[i]), buf[i], s.init_buffer, c);
    } else {
      P unused = P(0);
      for (int64_t i = ch.begin; i < ch.end; ++i)
        optim_math::sgd_update<P>(p[i], static_cast<P>(g[i]), unused, false, c);
    }
  });
}

void sgd_step_cpu(const std::vector<SgdSlot>& slots, const SgdHyper& h) {
  if (slots.empty()) return;
  dispatch_pair(slots[0].param.dtype(), slots[0].grad.dtype(), "sgd_step",
                [&]<typename P, typename G>() { sgd_typed<P, G>(slots, h); });
}

template <typename P, typename G> void adam_typed(const std::vector<AdamSlot>& slots, const AdamHyper& h) {
  const auto c = optim_math::adam_coeffs<P>(h);
  std::vector<int64_t> numels;
  std::vector<optim_math::AdamTensorCoeffs<P>> tc;
  for (const AdamSlot& s : slots) {
    numels.push_back(s.param.numel());
    tc.push_back(optim_math::adam_tensor_coeffs<P>(h, s.step));
  }
  for_chunks(make_chunks(numels), [&](const Chunk& ch) {
    const AdamSlot& s = slots[ch.index];
    P* p = static_cast<P*>(s.param.data_ptr());
    const G* g = static_cast<const G*>(s.grad.data_ptr());
    P* m = static_cast<P*>(s.exp_avg.data_ptr());
    P* v = static_cast<P*>(s.exp_avg_sq.data_ptr());
    const auto& t = tc[ch.index];
    // One loop per weight-decay mode, each with its flags fixed in a local copy of the coefficients:
    // with the branch gone from the loop body (and -fno-math-errno for sqrt) GCC vectorizes it.
    auto run = [&](const optim_math::AdamCoeffs<P>& cc) {
      for (int64_t i = ch.begin; i < ch.end; ++i)
        optim_math::adam_update<P>(p[i], static_cast<P>(g[i]), m[i], v[i], cc, t);
    };
    auto fixed = c;
    if (!c.use_weight_decay) {
      fixed.use_weight_decay = false;
      run(fixed);
    } else if (c.decoupled) {
      fixed.use_weight_decay = true;
      fixed.decoupled = true;
      run(fixed);
    } else {
      fixed.use_weight_decay = true;
      fixed.decoupled = false;
      run(fixed);
    }
  });
}

void adam_step_cpu(const std::vector<AdamSlot>& slots, const AdamHyper& h) {
  if (slots.empty()) return;
  dispatch_pair(slots[0].param.dtype(), slots[0].grad.dtype(), "adam_step",
                [&]<typename P, typename G>() { adam_typed<P, G>(slots, h); });
}

void global_norm_cpu(const std::vector<Tensor>& tensors, const Tensor& out) {
  std::vector<int64_t> numels;
  for (const Tensor& t : tensors) numels.push_back(t.numel());
  const std::vector<Chunk> chunks = make_chunks(numels);
  std::vector<double> partial(chunks.size(), 0.0);
  parallel_for(0, static_cast<int64_t>(chunks.size()), 1, [&](int64_t b, int64_t e) {
    for (int64_t c = b; c < e; ++c) {
      const Chunk& ch = chunks[static_cast<size_t>(c)];
      const Tensor& t = tensors[ch.index];
      EMBER_DISPATCH_FLOAT(t.dtype(), "global_norm (cpu)", [&]<typename T>() {
        const T* x = static_cast<const T*>(t.data_ptr());
        double acc = 0.0;
        for (int64_t i = ch.begin; i < ch.end; ++i) {
          const double v = static_cast<double>(static_cast<math_t<T>>(x[i]));
          acc += v * v;
        }
        partial[static_cast<size_t>(c)] = acc;
      });
    }
  });
  double total = 0.0;
  for (double p : partial) total += p;
  const double norm = std::sqrt(total);
  if (out.dtype() == DType::f64) *out.data<double>() = norm;
  else *out.data<float>() = static_cast<float>(norm);
}

void clip_by_norm_cpu(const std::vector<Tensor>& tensors, const Tensor& total_norm, double max_norm, double eps) {
  const double norm =
      total_norm.dtype() == DType::f64 ? *total_norm.data<double>() : static_cast<double>(*total_norm.data<float>());
  const double f = optim_math::clip_factor<double>(norm, max_norm, eps);
  std::vector<int64_t> numels;
  for (const Tensor& t : tensors) numels.push_back(t.numel());
  for_chunks(make_chunks(numels), [&](const Chunk& ch) {
    const Tensor& t = tensors[ch.index];
    EMBER_DISPATCH_FLOAT(t.dtype(), "clip_by_norm_ (cpu)", [&]<typename T>() {
      using M = math_t<T>;
      T* x = static_cast<T*>(t.data_ptr());
      const M fm = static_cast<M>(f);
      for (int64_t i = ch.begin; i < ch.end; ++i) x[i] = static_cast<T>(static_cast<M>(x[i]) * fm);
    });
  });
}

}  // namespace

void register_optim() {
  sgd_step_table.set(DeviceType::CPU, &sgd_step_cpu);
  adam_step_table.set(DeviceType::CPU, &adam_step_cpu);
  global_norm_table.set(DeviceType::CPU, &global_norm_cpu);
  clip_by_norm_table.set(DeviceType::CPU, &clip_by_norm_cpu);
}

}  // namespace ember::kernels::cpu
