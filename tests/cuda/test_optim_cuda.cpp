// CUDA fused optimizer kernels (kernels/cuda/optim.cu) against the CPU twin and the float64
// reference loops of tests/optim/optim_reference.h: SGD (every option), Adam/AdamW, f16/bf16
// gradients, more tensors than one launch takes (48), tensors spanning many chunks, misaligned and
// strided views (scalar path), the deterministic global norm over mixed dtypes, clipping read on
// the device, a state dict moved between devices, and optimizer state following parameters that
// Module::to moved to the GPU after the optimizer was built.
//
// Tolerances: both devices run the same f32 formulas (kernels/optim_math.h) but may contract
// a*b+c into FMAs differently, so they agree to a few roundings: opt_bound(dt, ref) as for the CPU
// against float64. Norms: squares are summed in double on both devices, so a norm is off by about
// one f32 rounding of the result, loose_tol(f32) relative (plus loose_tol_sum(f64, count) for the sum).
#include <catch2/catch.hpp>

#include <cmath>
#include <memory>
#include <vector>

#include <ember/autograd/ops.h>
#include <ember/core/device.h>
#include <ember/core/rng.h>
#include <ember/kernels/factory.h>
#include <ember/kernels/optim.h>
#include <ember/layers/linear.h>
#include <ember/optim/adam.h>
#include <ember/optim/clip.h>
#include <ember/optim/sgd.h>
#include "optim/optim_reference.h"
#include "support/reference.h"

using namespace ember;
using namespace ember::testing;

namespace {

const Device kGpu = Device::cuda(0);

/// Sizes that exercise the kernels: single elements, non-multiples of the vector width, exactly
/// one chunk (4096), one past it, and a tensor of many chunks.
std::vector<Shape> many_shapes(size_t n) {
  const std::vector<Shape> base = {{1}, {3}, {4097}, {4096}, {17, 31}, {5, 1, 7}, {2, 2}, {129}};
  std::vector<Shape> out;
  for (size_t i = 0; i < n; ++i) out.push_back(base[i % base.size()]);
  out.push_back({1000003});
  return out;
}

/// CPU and CUDA copies of the same parameters (leaves requiring grad).
struct Twin {
  std::vector<Tensor> cpu, gpu;
  std::vector<std::vector<double>> ref;
};
Twin make_twin(const std::vector<Shape>& shapes, DType dt, uint64_t seed) {
  Twin t;
  for (size_t i = 0; i < shapes.size(); ++i) {
    Tensor c = random_tensor(shapes[i], dt, seed + i);
    t.ref.push_back(to_f64(c));
    Tensor g = c.to(kGpu);
    c.requires_grad_();
    g.requires_grad_();
    t.cpu.push_back(c);
    t.gpu.push_back(g);
  }
  return t;
}

}  // namespace

TEST_CASE("CUDA SGD: fused step matches the CPU twin and float64, every option, 57 tensors", "[cuda][optim]") {
  struct Combo {
    double momentum, dampening, weight_decay;
    bool nesterov;
  };
  const std::vector<Combo> combos = {
      {0, 0, 0, false}, {0.9, 0, 0, false}, {0.9, 0.3, 1e-2, false}, {0.9, 0, 1e-3, true}};
  const std::vector<Shape> shapes = many_shapes(56);  // 57 tensors: two launches
  for (const DType dt : {DType::f32, DType::f64}) {
    for (const Combo& c : combos) {
      INFO(dtype_name(dt) << " momentum " << c.momentum << " dampening " << c.dampening << " wd " << c.weight_decay
                          << " nesterov " << c.nesterov);
      Twin t = make_twin(shapes, dt, 1000);
      const optim::SGDOptions o{.lr = 0.05,
                                .momentum = c.momentum,
                                .dampening = c.dampening,
                                .weight_decay = c.weight_decay,
                                .nesterov = c.nesterov};
      optim::SGD oc(t.cpu, o), og(t.gpu, o);
      std::vector<SgdRef> st(shapes.size(), SgdRef{0.05, c.momentum, c.dampening, c.weight_decay, c.nesterov});
      for (int s = 0; s < 3; ++s) {
        for (size_t i = 0; i < shapes.size(); ++i) {
          Tensor g = random_tensor(shapes[i], dt, 5000 + 100 * s + i);
          t.cpu[i].set_grad(g);
          t.gpu[i].set_grad(g.to(kGpu));
          st[i].step(t.ref[i], to_f64(g));
        }
        oc.step();
        og.step();
      }
      for (size_t i = 0; i < shapes.size(); ++i) {
        INFO("tensor " << i << " shape " << shape_str(shapes[i]));
        CHECK(t.gpu[i].device() == kGpu);
        check_param(t.gpu[i], t.ref[i], dt);
        check_param(t.gpu[i], to_f64(t.cpu[i]), dt);
      }
      if (c.momentum != 0) check_param(og.state(56).at("momentum_buffer"), st[56].buf, dt);
    }
  }
}

TEST_CASE("CUDA Adam/AdamW: fused step matches the CPU twin and float64, 57 tensors", "[cuda][optim]") {
  const std::vector<Shape> shapes = many_shapes(56);
  for (const DType dt : {DType::f32, DType::f64}) {
    for (const bool decoupled : {false, true}) {
      INFO(dtype_name(dt) << (decoupled ? " AdamW" : " Adam"));
      Twin t = make_twin(shapes, dt, 2000);
      std::unique_ptr<optim::Optimizer> oc, og;
      if (decoupled) {
        const optim::AdamWOptions o{.lr = 0.01, .betas = {0.8, 0.99}, .weight_decay = 0.1};
        oc = std::make_unique<optim::AdamW>(t.cpu, o);
        og = std::make_unique<optim::AdamW>(t.gpu, o);
      } else {
        const optim::AdamOptions o{.lr = 0.01, .weight_decay = 1e-2};
        oc = std::make_unique<optim::Adam>(t.cpu, o);
        og = std::make_unique<optim::Adam>(t.gpu, o);
      }
      std::vector<AdamRef> st(shapes.size());
      for (auto& r : st)
        r = decoupled ? AdamRef{0.01, 0.8, 0.99, 1e-8, 0.1, true} : AdamRef{0.01, 0.9, 0.999, 1e-8, 1e-2, false};
      for (int s = 0; s < 3; ++s) {
        for (size_t i = 0; i < shapes.size(); ++i) {
          if (i == 3 && s == 1) {  // a skipped step: its own bias correction from then on
            t.cpu[i].set_grad(Tensor());
            t.gpu[i].set_grad(Tensor());
            continue;
          }
          Tensor g = random_tensor(shapes[i], dt, 7000 + 100 * s + i);
          t.cpu[i].set_grad(g);
          t.gpu[i].set_grad(g.to(kGpu));
          st[i].step(t.ref[i], to_f64(g));
        }
        oc->step();
        og->step();
      }
      for (size_t i = 0; i < shapes.size(); ++i) {
        INFO("tensor " << i << " shape " << shape_str(shapes[i]));
        check_param(t.gpu[i], t.ref[i], dt);
        check_param(t.gpu[i], to_f64(t.cpu[i]), dt);
      }
      check_param(og->state(56).at("exp_avg_sq"), st[56].v, dt);
      CHECK(og->state(3).at("step").item<int64_t>() == 2);
      CHECK(og->state(3).at("step").device() == Device::cpu());
    }
  }
}

TEST_CASE("CUDA fused kernels: f16/bf16 gradients, misaligned and strided views", "[cuda][optim]") {
  for (const DType gdt : {DType::f16, DType::bf16, DType::f32}) {
    INFO("grad dtype " << dtype_name(gdt));
    // Parameters at an odd element offset of a buffer (not 16-byte aligned: the scalar path),
    // a transposed parameter, and an aligned one of many chunks (the vector path).
    Tensor big = random_tensor({40001}, DType::f32, 1, -1, 1, Layout::Contiguous, kGpu);
    Tensor misaligned = big.narrow(0, 1, 40000);
    Tensor transposed = random_tensor({33, 65}, DType::f32, 2, -1, 1, Layout::Transposed, kGpu);
    Tensor aligned = random_tensor({300001}, DType::f32, 3, -1, 1, Layout::Contiguous, kGpu);
    std::vector<Tensor> ps = {misaligned, transposed, aligned};
    std::vector<Tensor> ms, vs, cpu_p, cpu_m, cpu_v, grads;
    std::vector<std::vector<double>> ref;
    std::vector<AdamRef> st;
    for (size_t i = 0; i < ps.size(); ++i) {
      ms.push_back(zeros(ps[i].sizes(), {.dtype = DType::f32, .device = kGpu}));
      vs.push_back(zeros(ps[i].sizes(), {.dtype = DType::f32, .device = kGpu}));
      cpu_p.push_back(ps[i].to(Device::cpu()).contiguous());
      cpu_m.push_back(zeros(ps[i].sizes()));
      cpu_v.push_back(zeros(ps[i].sizes()));
      ref.push_back(to_f64(ps[i]));
      st.push_back(AdamRef{0.02, 0.9, 0.999, 1e-8, 0, false});
    }
    for (int s = 0; s < 2; ++s) {
      std::vector<kernels::AdamSlot> gpu_slots, cpu_slots;
      for (size_t i = 0; i < ps.size(); ++i) {
        Tensor g = random_tensor(ps[i].sizes(), gdt, 40 + 10 * s + i);
        st[i].step(ref[i], to_f64(g));
        gpu_slots.push_back({ps[i], g.to(kGpu), ms[i], vs[i], s + 1});
        cpu_slots.push_back({cpu_p[i], g, cpu_m[i], cpu_v[i], s + 1});
      }
      kernels::adam_step(gpu_slots, {.lr = 0.02});
      kernels::adam_step(cpu_slots, {.lr = 0.02});
    }
    for (size_t i = 0; i < ps.size(); ++i) {
      INFO("operand " << i);
      check_param(ps[i], ref[i], DType::f32);
      check_param(ps[i], to_f64(cpu_p[i]), DType::f32);
    }
    // The element before the misaligned view is untouched.
    CHECK(to_f64(big.narrow(0, 0, 1))[0] == round_to(DType::f32, random_values(1, 1)[0]));
  }
}

TEST_CASE("CUDA global_norm and clipping: mixed dtypes, 60 tensors, 2^24 elements, deterministic", "[cuda][optim]") {
  std::vector<Tensor> ts;
  int64_t count = 0;
  double sq = 0;
  const DType dts[] = {DType::f32, DType::f16, DType::bf16, DType::f64};
  for (size_t i = 0; i < 60; ++i) {
    const Shape shape = i == 7 ? Shape{1 << 24} : Shape{static_cast<int64_t>(1 + 37 * i)};
    const Layout layout = i % 5 == 4 ? Layout::Strided : Layout::Contiguous;
    Tensor t = random_tensor(shape, dts[i % 4], 900 + i, -1, 1, layout, kGpu);
    for (double v : to_f64(t)) sq += v * v;
    count += t.numel();
    ts.push_back(t);
  }
  const double norm_tol = loose_tol(DType::f32) + loose_tol_sum(DType::f64, count);
  Tensor n = kernels::global_norm(ts);
  CHECK(n.device() == kGpu);
  CHECK(n.dtype() == DType::f32);
  CHECK(n.item<double>() == Approx(std::sqrt(sq)).epsilon(norm_tol));
  CHECK(kernels::global_norm(ts).item<float>() == n.item<float>());  // same bits every time
  // Without the 2^24-element tensor any tensor or launch (48 tensors each) missing from the sum
  // changes the norm by far more than the bound.
  std::vector<Tensor> small(ts.begin(), ts.begin() + 7);
  small.insert(small.end(), ts.begin() + 8, ts.end());
  double small_sq = 0;
  int64_t small_count = 0;
  for (const Tensor& t : small)
    for (double v : to_f64(t)) small_sq += v * v, ++small_count;
  CHECK(kernels::global_norm(small).item<double>() ==
        Approx(std::sqrt(small_sq)).epsilon(loose_tol(DType::f32) + loose_tol_sum(DType::f64, small_count)));
  std::vector<Tensor> cpu_ts;
  for (const Tensor& t : ts) cpu_ts.push_back(t.to(Device::cpu()));
  CHECK(kernels::global_norm(cpu_ts).item<double>() == Approx(n.item<double>()).epsilon(2 * norm_tol));

  // Clip on the device (the norm never visits the host) and on the CPU: same values.
  kernels::clip_by_norm_(ts, n, 3.0);
  kernels::clip_by_norm_(cpu_ts, n.to(Device::cpu()), 3.0);
  for (size_t i = 0; i < ts.size(); ++i) {
    INFO("tensor " << i << " " << dtype_name(ts[i].dtype()));
    check_close(ts[i], to_f64(cpu_ts[i]), 2 * loose_tol(ts[i].dtype()));
  }
  CHECK(kernels::global_norm(ts).item<double>() == Approx(3.0).epsilon(loose_tol_sum(DType::f32, count) + 1e-6));
}

TEST_CASE("CUDA global_norm: values whose squares leave the f32 range", "[cuda][optim]") {
  // |x| ~ 1e20 squares to inf in f32 and |x| ~ 1e-25 to 0, yet both norms are ordinary f32
  // numbers; the CPU twin gets them right, so must the GPU (exploding gradients are exactly
  // what clipping is for: a norm of inf would zero them instead of scaling them).
  for (const double scale : {1.0e20, 1.0e-25}) {
    INFO("scale " << scale);
    std::vector<Tensor> ts, cpu_ts;
    double sq = 0;
    int64_t count = 0;
    for (size_t i = 0; i < 4; ++i) {
      const DType dt = i % 2 == 0 ? DType::f32 : DType::bf16;
      Tensor t =
          random_tensor({static_cast<int64_t>(1000 + 7 * i)}, dt, 70 + i, -scale, scale, Layout::Contiguous, kGpu);
      for (double v : to_f64(t)) sq += v * v;
      count += t.numel();
      ts.push_back(t);
      cpu_ts.push_back(t.to(Device::cpu()));
    }
    const double norm_tol = loose_tol(DType::f32) + loose_tol_sum(DType::f64, count);
    Tensor n = kernels::global_norm(ts);
    CHECK(n.item<double>() == Approx(std::sqrt(sq)).epsilon(norm_tol));
    CHECK(kernels::global_norm(cpu_ts).item<double>() == Approx(std::sqrt(sq)).epsilon(norm_tol));
    if (scale > 1.0) {
      // Clipped to norm 1 (each element re-rounded to its dtype once: loose_tol(bf16) relative at most).
      kernels::clip_by_norm_(ts, n, 1.0);
      CHECK(kernels::global_norm(ts).item<double>() == Approx(1.0).epsilon(loose_tol(DType::bf16)));
    }
  }
}

TEST_CASE("CUDA clip_grad_norm_ and a state dict moved between devices", "[cuda][optim]") {
  Twin t = make_twin({{64, 9}, {9}}, DType::f32, 77);
  for (size_t i = 0; i < 2; ++i) {
    Tensor g = random_tensor(t.cpu[i].sizes(), DType::f32, 88 + i, -3, 3);
    t.cpu[i].set_grad(g);
    t.gpu[i].set_grad(g.to(kGpu));
  }
  Tensor nc = optim::clip_grad_norm_(t.cpu, 1.0);
  Tensor ng = optim::clip_grad_norm_(t.gpu, 1.0);
  CHECK(ng.device() == kGpu);
  CHECK(ng.item<double>() == Approx(nc.item<double>()).epsilon(loose_tol_sum(DType::f32, 64 * 9 + 9)));
  for (size_t i = 0; i < 2; ++i)
    check_close(t.gpu[i].grad(), to_f64(t.cpu[i].grad()), 2 * loose_tol_sum(DType::f32, 585));

  // Adam on the GPU for a step, its state dict into a CPU optimizer over copied parameters: the
  // next step agrees across devices.
  optim::Adam og(t.gpu, {.lr = 0.01});
  og.step();
  std::vector<Tensor> pc;
  for (const Tensor& p : t.gpu) pc.push_back(p.to(Device::cpu()).detach().requires_grad_());
  optim::Adam oc(pc, {.lr = 0.5});
  oc.load_state_dict(og.state_dict());
  CHECK(oc.state(0).at("exp_avg").device() == Device::cpu());
  for (size_t i = 0; i < 2; ++i) {
    Tensor g = random_tensor(pc[i].sizes(), DType::f32, 99 + i);
    pc[i].set_grad(g);
    t.gpu[i].set_grad(g.to(kGpu));
  }
  og.step();
  oc.step();
  for (size_t i = 0; i < 2; ++i) check_param(t.gpu[i], to_f64(pc[i]), DType::f32);
}

TEST_CASE("CUDA optimizers built before Module::to(cuda) carry their CPU state to the GPU", "[cuda][optim]") {
  // Module::to rewrites each parameter in place, so an optimizer built on the CPU keeps naming the
  // same tensors; the momentum buffers / moments its CPU steps made must follow them to the GPU
  // (Optimizer::state_tensor), not restart from zero nor stay behind. Twin: the same model and
  // optimizer kept on the CPU. Forward/backward differ only in f32 summation order (dot products
  // of length 37), far inside opt_bound.
  for (const bool adam : {false, true}) {
    INFO((adam ? "Adam" : "SGD with momentum"));
    manual_seed(11);
    auto moved = std::make_shared<layers::Linear>(37, 5);
    manual_seed(11);
    auto stay = std::make_shared<layers::Linear>(37, 5);
    auto make = [&](layers::Module& m) -> std::unique_ptr<optim::Optimizer> {
      if (adam) return std::make_unique<optim::Adam>(m.parameters(), optim::AdamOptions{.lr = 0.01});
      return std::make_unique<optim::SGD>(m.parameters(), optim::SGDOptions{.lr = 0.05, .momentum = 0.9});
    };
    std::unique_ptr<optim::Optimizer> om = make(*moved), os = make(*stay);
    const Tensor x = random_tensor({8, 37}, DType::f32, 5);
    auto step = [&](layers::Module& m, optim::Optimizer& o, Device d) {
      o.zero_grad();
      Tensor y = m.forward(x.to(d));
      sum(y * y).backward();
      o.step();
    };
    for (int i = 0; i < 2; ++i) {
      step(*moved, *om, Device::cpu());
      step(*stay, *os, Device::cpu());
    }
    moved->to(kGpu);
    for (int i = 0; i < 3; ++i) {
      step(*moved, *om, kGpu);
      step(*stay, *os, Device::cpu());
    }
    const std::vector<Tensor> pm = moved->parameters(), ps = stay->parameters();
    REQUIRE(pm.size() == ps.size());
    for (size_t i = 0; i < pm.size(); ++i) {
      INFO("parameter " << i << " shape " << pm[i].shape_str());
      CHECK(pm[i].device() == kGpu);
      check_param(pm[i], to_f64(ps[i]), DType::f32);
      for (const auto& [name, t] : os->state(i)) {
        INFO("state " << name);
        const Tensor& g = om->state(i).at(name);
        if (name == "step") {
          CHECK(g.item<int64_t>() == t.item<int64_t>());
        } else {
          CHECK(g.device() == kGpu);
          check_param(g, to_f64(t), DType::f32);
        }
      }
    }
  }
}
