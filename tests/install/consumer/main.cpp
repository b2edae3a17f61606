// A user program built outside the ember tree: tensors, a small autograd computation, checked
// against values worked out by hand. Exits 1 on any mismatch.
#include <ember/ember.h>

#include <cmath>
#include <cstdio>
#include <vector>

using namespace ember;

namespace {
bool near(double got, double want, const char* what) {
  const bool ok = std::fabs(got - want) <= 1e-5 * (1.0 + std::fabs(want));
  std::printf("%-10s got %.6f, expected %.6f%s\n", what, got, want, ok ? "" : "  <-- MISMATCH");
  return ok;
}
}  // namespace

int main() {
  try {
    Device dev = Device::best();
    std::printf("ember consumer on %s\n", dev.str().c_str());
    // x (3), w (3) leaf with grad, a (2, 3).
    Tensor x = from_vector(std::vector<float>{1, 2, 3}, {3}, {.device = dev});
    Tensor w = from_vector(std::vector<float>{0.5f, -1, 2}, {3}, {.device = dev}).requires_grad_();
    Tensor a = from_vector(std::vector<float>{1, 2, 3, -4, 5, -6}, {2, 3}, {.device = dev});
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
    std::printf("%s\n", ok ? "consumer: OK" : "consumer: FAILED");
    return ok ? 0 : 1;
  } catch (const Error& e) {
    std::printf("consumer: ember::Error: %s\n", e.what());
    return 1;
  }
}
