// Tensor::str(): exact expected strings, written out by hand in PyTorch's layout.
#include <catch2/catch.hpp>

#include <sstream>

#include <ember/kernels/factory.h>
#include "support/reference.h"

using namespace ember;

TEST_CASE("print: 2-D f32 in fixed point with aligned rows", "[cpu]") {
  Tensor t = from_vector({1, 2, 3, 4}, {2, 2}, {.dtype = DType::f32});
  CHECK(t.str() == "tensor([[1.0000, 2.0000],\n        [3.0000, 4.0000]])");
  std::ostringstream os;
  os << t;
  CHECK(os.str() == t.str());
}

TEST_CASE("print: 0-d, negative padding, dtype suffix", "[cpu]") {
  CHECK(from_vector({3.5}, {}, {.dtype = DType::f32}).str() == "tensor(3.5000)");
  CHECK(from_vector<double>({-1.5, 2}, {2}, {.dtype = DType::f32}).str() == "tensor([-1.5000,  2.0000])");
  CHECK(from_vector<double>({0.25, -8}, {2}, {.dtype = DType::f64}).str() == "tensor([ 0.2500, -8.0000], dtype=f64)");
  CHECK(from_vector({0.5}, {1}, {.dtype = DType::f16}).str() == "tensor([0.5000], dtype=f16)");
  CHECK(from_vector({0, 1, 2, 3, 4}, {5}, {.dtype = DType::i64}).str() == "tensor([0, 1, 2, 3, 4], dtype=i64)");
  CHECK(from_vector({-7, 12}, {2}, {.dtype = DType::i32}).str() == "tensor([-7, 12], dtype=i32)");
  CHECK(from_vector({1, 0}, {2}, {.dtype = DType::boolean}).str() == "tensor([ True, False], dtype=bool)");
}

TEST_CASE("print: scientific notation, nan and inf", "[cpu]") {
  CHECK(from_vector({1e-5, 1.0}, {2}, {.dtype = DType::f32}).str() == "tensor([1.0000e-05, 1.0000e+00])");
  CHECK(from_vector({2e9, 1.0}, {2}, {.dtype = DType::f32}).str() == "tensor([2.0000e+09, 1.0000e+00])");
  CHECK(from_vector<double>({NAN, INFINITY, -INFINITY, 1.0}, {4}, {.dtype = DType::f32}).str() ==
        "tensor([   nan,    inf,   -inf, 1.0000])");
}

TEST_CASE("print: 3-D separates matrices with a blank line", "[cpu]") {
  Tensor t = from_vector({0, 1, 2, 3, 4, 5, 6, 7}, {2, 2, 2}, {.dtype = DType::i32});
  CHECK(t.str() ==
        "tensor([[[0, 1],\n"
        "         [2, 3]],\n"
        "\n"
        "        [[4, 5],\n"
        "         [6, 7]]], dtype=i32)");
}

TEST_CASE("print: non-contiguous views print in logical order", "[cpu]") {
  Tensor t = from_vector({1, 2, 3, 4, 5, 6}, {2, 3}, {.dtype = DType::i64});
  Tensor tt = as_strided_raw(t, {3, 2}, {1, 3}, 0);  // the transpose
  CHECK(tt.str() == "tensor([[1, 4],\n        [2, 5],\n        [3, 6]], dtype=i64)");
}

TEST_CASE("print: empty tensors", "[cpu]") {
  CHECK(zeros({0}).str() == "tensor([])");
  CHECK(zeros({0, 3}, {.dtype = DType::f64}).str() == "tensor([], size=[0, 3], dtype=f64)");
}

TEST_CASE("print: summarizes past 1000 elements", "[cpu]") {
  CHECK(arange(2000).str() == "tensor([   0,    1,    2,  ..., 1997, 1998, 1999], dtype=i64)");
  CHECK(arange(1000).str().find("...") == std::string::npos);

  Tensor m = arange(0, 40 * 40, 1, {.dtype = DType::i32}).view({40, 40});
  const std::string s = m.str();
  CHECK(s.rfind("tensor([[   0,    1,    2,  ...,   37,   38,   39],\n", 0) == 0);
  CHECK(s.find("\n        ...,\n") != std::string::npos);
  CHECK(s.find("[1560, 1561, 1562,  ..., 1597, 1598, 1599]], dtype=i32)") != std::string::npos);
  // 3 rows, "...", 3 rows.
  CHECK(std::count(s.begin(), s.end(), '\n') == 6);
}

TEST_CASE("print: long rows wrap at 80 columns", "[cpu]") {
  Tensor t = arange(0, 30, 1, {.dtype = DType::f32});  // width 7 ("29.0000"): (80 - 7) / 9 = 8 per line
  const std::string s = t.str();
  CHECK(s.rfind("tensor([ 0.0000,  1.0000,  2.0000,  3.0000,  4.0000,  5.0000,  6.0000,  7.0000,\n"
                "         8.0000,",
                0) == 0);
  std::istringstream lines(s);
  std::string line;
  while (std::getline(lines, line)) CHECK(line.size() <= 80);
}

TEST_CASE("print: requires_grad suffix", "[cpu]") {
  Tensor t = from_vector({1, 2}, {2}, {.dtype = DType::f32});
  t.requires_grad_();
  CHECK(t.str() == "tensor([1.0000, 2.0000], requires_grad=True)");
  CHECK(Tensor().str() == "tensor(undefined)");
}
