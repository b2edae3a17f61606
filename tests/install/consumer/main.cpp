// A user program built outside the ember tree: tensors made from braced literals and TensorOptions
// (designated initialisers), a small autograd computation, checked against values worked out by
// hand. Exits 1 on any mismatch. That this file compiles against the installed headers is itself
// part of the test: the literals must not be ambiguous.
#include <ember/ember.h>

#include <cmath>
#include <cstdio>
#include <vector>

using namespace ember;

namespace {
bool near(double got, double want, const char* what) {
  const bool ok = std::fabs(got - want) <= 1e-5 * (1.0 + std::fabs(want));
  std::printf("%-14s got %.6f, expected %.6f%s\n", what, got, want, ok ? "" : "  <-- MISMATCH");
  return ok;
}
bool holds(bool cond, const char* what) {
  std::printf("%-14s %s\n", what, cond ? "ok" : "<-- MISMATCH");
  return cond;
}
}  // namespace

int main() {
  try {
    Device dev = Device::best();
    std::printf("ember consumer on %s\n", dev.str().c_str());
    // x (3), w (3) leaf with grad, a (2, 3): the literals pick f32, the options the device.
    Tensor x = from_vector({1.0f, 2.0f, 3.0f}, {3}, {.device = dev});
    Tensor w = tensor({0.5f, -1.0f, 2.0f}, {.device = dev, .requires_grad = true});
    Tensor a = tensor({{1.0f, 2.0f, 3.0f}, {-4.0f, 5.0f, -6.0f}}, {.device = dev});
    // loss = sum((x * w)^2) + mean(relu(a @ w))
    //      = (0.25 + 4 + 36) + mean(relu([4.5, -19])) = 40.25 + 2.25 = 42.5
    // dloss/dw = 2 x^2 w + 0.5 * a[0] = [1, -8, 36] + [0.5, 1, 1.5] = [1.5, -7, 37.5]
    Tensor xw = x * w;
    Tensor loss = sum(xw * xw) + mean(relu(matmul(a, w)));
    loss.backward();
    bool ok = near(loss.item<float>(), 42.5, "loss");
    std::vector<float> g = w.grad().to_vector<float>();
    const double want[3] = {1.5, -7, 37.5};
    for (int i = 0; i < 3; ++i) ok = near(g[static_cast<size_t>(i)], want[i], "dloss/dw") && ok;

    // Shapes and dtypes as the literals and options give them.
    Tensor r = randn({3, 2}, {.device = dev});
    ok = holds(r.sizes() == Shape{3, 2} && r.dtype() == DType::f32 && r.device() == dev, "randn options") && ok;
    Tensor i = tensor({{1, 2}, {3, 4}});
    ok = holds(i.dtype() == DType::i64 && i.sizes() == Shape{2, 2}, "int literal") && ok;
    ok = near(static_cast<double>(i.to_vector<int64_t>()[3]), 4, "int literal") && ok;
    Tensor z = zeros({4}, {.dtype = DType::f64});
    ok = holds(z.dtype() == DType::f64 && z.device() == Device::cpu(), "zeros options") && ok;
    Tensor v = from_vector({0.1f, 0.2f, 0.3f}, {3});
    ok = near(v.to_vector<float>()[1], 0.2f, "from_vector") && ok;

    // Memory the program owns, seen through a tensor without a copy.
    float buf[4] = {1, 2, 3, 4};
    Tensor blob = from_blob(buf, {2, 2});
    blob.fill_(7.0);
    ok = near(buf[3], 7.0, "from_blob") && ok;

    std::printf("%s\n", ok ? "consumer: OK" : "consumer: FAILED");
    return ok ? 0 : 1;
  } catch (const Error& e) {
    std::printf("consumer: ember::Error: %s\n", e.what());
    return 1;
  }
}
