// Checkpoints with GPU tensors: saving reads them back from the device (any layout or offset), loading
// places every tensor on the requested device, and a GPU model/optimizer resumed from a
// checkpoint continues exactly like the uninterrupted run.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include <ember/ember.h>

#include "support/bitwise.h"
#include "support/reference.h"
#include "support/temp_dir.h"

using namespace ember;
using ember::testing::bytes_of;
using ember::testing::Layout;
using ember::testing::random_tensor;
using ember::testing::TempDir;
using ember::testing::to_f64;

namespace {

const Device kGpu = Device::cuda(0);

}  // namespace

TEST_CASE("checkpoint (CUDA): GPU tensors of every dtype round-trip and load onto the GPU", "[cuda][checkpoint]") {
  const DType dtypes[] = {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64, DType::u8};
  StateDict entries;
  uint64_t seed = 1;
  for (DType dt : dtypes) {
    const std::string n = dtype_name(dt);
    entries[n + "/transposed"] = random_tensor({5, 3, 7}, dt, seed++, 0, 100, Layout::Transposed, kGpu);
    entries[n + "/strided"] = random_tensor({4, 9}, dt, seed++, 0, 100, Layout::Strided, kGpu);
    entries[n + "/scalar"] = random_tensor({}, dt, seed++, 0, 100, Layout::Contiguous, kGpu);
    // Contiguous but 3 elements into its buffer: the device -> host copy must start at the view's
    // storage offset (the neighbours hold other random values, so a wrong start shows).
    entries[n + "/offset"] = random_tensor({37}, dt, seed++, 0, 100, Layout::Contiguous, kGpu).narrow(0, 3, 31);
  }
  TempDir dir;
  const std::string path = dir.file("gpu.ckpt");
  serialize::save_tensors(entries, path);
  for (Device target : {Device::cpu(), kGpu}) {
    const StateDict back = serialize::load_tensors(path, target);
    REQUIRE(back.size() == entries.size());
    for (const auto& [name, t] : entries) {
      INFO(name << " loaded on " << target.str());
      const Tensor& b = back.at(name);
      CHECK(b.device() == target);
      CHECK(b.dtype() == t.dtype());
      CHECK(b.sizes() == t.sizes());
      CHECK(to_f64(b) == to_f64(t));
    }
  }
}

TEST_CASE("checkpoint (CUDA): a GPU run resumed from a checkpoint matches the uninterrupted run",
          "[cuda][checkpoint]") {
  // The conv has no bias: before a training-mode BatchNorm its gradient is zero up to rounding,
  // and Adam, which divides by the gradient's own magnitude, would turn that rounding noise into
  // steps of about lr, so two runs that differ only in summation order (non-deterministic cuDNN
  // backward algorithms) would end O(lr) apart in that one parameter and fail the 1e-4 check.
  auto make = [](uint64_t init_seed) {
    manual_seed(init_seed);
    auto model = std::make_shared<layers::Sequential>(std::initializer_list<layers::ModulePtr>{
        std::make_shared<layers::Conv2d>(1, 4, 3, layers::Conv2dOptions{.bias = false}),
        std::make_shared<layers::BatchNorm2d>(4), std::make_shared<layers::ReLU>(),
        std::make_shared<layers::Dropout>(0.3), std::make_shared<layers::Flatten>(),
        std::make_shared<layers::Linear>(4 * 6 * 6, 3)});
    model->to(kGpu);
    return model;
  };
  const Tensor x = random_tensor({6, 1, 8, 8}, DType::f32, 7, -1, 1, Layout::Contiguous, kGpu);
  const Tensor y = from_vector(std::vector<int64_t>{0, 1, 2, 0, 1, 2}, {6}, {.device = kGpu});
  auto step = [&](layers::Module& m, optim::Optimizer& opt) {
    Tensor loss = layers::cross_entropy(m.forward(x), y);
    opt.zero_grad();
    loss.backward();
    opt.step();
  };
  TempDir dir;
  const std::string path = dir.file("run.ckpt");

  auto a = make(3);
  optim::Adam opt_a(a->parameters(), {.lr = 1e-2});
  for (int i = 0; i < 4; ++i) step(*a, opt_a);
  serialize::Checkpoint ck;
  ck.model = a->state_dict();
  ck.optimizer = opt_a.state_dict();
  serialize::capture_rng(ck);
  serialize::save_checkpoint(ck, path);
  for (int i = 0; i < 5; ++i) step(*a, opt_a);

  auto b = make(99);
  optim::Adam opt_b(b->parameters(), {.lr = 1e-2});
  const serialize::Checkpoint loaded = serialize::load_checkpoint(path, kGpu);
  for (const auto& [name, t] : loaded.model) CHECK(t.device() == kGpu);
  b->load_state_dict(loaded.model);
  opt_b.load_state_dict(loaded.optimizer);
  serialize::restore_rng(loaded);
  for (int i = 0; i < 5; ++i) step(*b, opt_b);

  // cuDNN may pick non-deterministic (atomic) backward algorithms, so first see whether two
  // uninterrupted runs agree bit for bit here; if they do the resumed run must too, otherwise it
  // must agree as closely as two uninterrupted runs can (f32 rounding of 9 steps).
  auto c = make(3);
  optim::Adam opt_c(c->parameters(), {.lr = 1e-2});
  for (int i = 0; i < 9; ++i) step(*c, opt_c);
  const StateDict sa = a->state_dict(), sb = b->state_dict(), sc = c->state_dict();
  bool deterministic = true;
  for (const auto& [name, t] : sa) deterministic = deterministic && bytes_of(t) == bytes_of(sc.at(name));
  REQUIRE(sa.size() == sb.size());
  for (const auto& [name, t] : sa) {
    INFO(name << (deterministic ? " (bitwise: this GPU's runs are deterministic)" : " (within 1e-4)"));
    if (deterministic) {
      CHECK(bytes_of(t) == bytes_of(sb.at(name)));
    } else {
      ember::testing::check_close(sb.at(name), to_f64(t), 1e-4, 1e-6);
    }
  }
}
