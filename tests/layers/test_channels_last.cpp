// Module::to(MemoryFormat) and a whole CNN in channels-last: the weights change layout in place
// (the same parameters, still leaves), and forward and backward give the row-major model's values.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <vector>

#include <ember/autograd/ops.h>
#include <ember/core/rng.h>
#include <ember/models/cifar_cnn.h>
#include "support/reference.h"

using namespace ember;
using namespace ember::testing;

namespace {

/// f64 results of the two layouts differ only in the order of sums (batch norm's statistics):
/// a few units of f64 rounding per operation along a path of about 10^4 additions.
void check_close(const Tensor& a, const Tensor& b) {
  const std::vector<double> x = to_f64(a), y = to_f64(b);
  REQUIRE(x.size() == y.size());
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i)
    worst = std::max(worst, std::fabs(x[i] - y[i]) / std::max(1.0, std::fabs(y[i])));
  CHECK(worst <= 1e-10);
}

}  // namespace

TEST_CASE("channels_last: Module::to lays out 4-D weights in place, a CIFAR CNN gives the row-major values",
          "[cpu][memory_format]") {
  manual_seed(5);
  auto cl = models::cifar_cnn(10, 0.0);
  manual_seed(5);
  auto rm = models::cifar_cnn(10, 0.0);
  cl->to(DType::f64);
  rm->to(DType::f64);
  const std::vector<Tensor> handles = cl->parameters();
  cl->to(MemoryFormat::channels_last);
  const std::vector<Tensor> after = cl->parameters();
  REQUIRE(after.size() == handles.size());
  int converted = 0;
  for (size_t i = 0; i < after.size(); ++i) {
    const Tensor& p = after[i];
    CHECK(p.is_same(handles[i]));  // the same parameter, rebound in place
    CHECK(p.is_leaf());
    CHECK(p.requires_grad());
    if (p.dim() == 4) {
      CHECK(p.suggest_memory_format() == MemoryFormat::channels_last);
      ++converted;
    } else {
      CHECK(p.is_contiguous());
    }
  }
  CHECK(converted == 6);  // the six 3x3 convolutions

  const Tensor x = random_tensor({4, 3, 32, 32}, DType::f64, 9);
  const Tensor y_cl = cl->forward(x.contiguous(MemoryFormat::channels_last));
  const Tensor y_rm = rm->forward(x);
  check_close(y_cl, y_rm);
  sum(y_cl * y_cl).backward();
  sum(y_rm * y_rm).backward();
  const std::vector<Tensor> pr = rm->parameters();
  for (size_t i = 0; i < after.size(); ++i) {
    INFO("parameter " << i << " " << after[i].shape_str());
    check_close(after[i].grad(), pr[i].grad());
  }
  cl->to(MemoryFormat::contiguous);
  for (const Tensor& p : cl->parameters()) CHECK(p.is_contiguous());
}
