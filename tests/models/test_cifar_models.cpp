// The CIFAR model zoo (models/cifar_cnn, models/resnet, models/wide_resnet, models/blocks):
// parameter counts against a formula written here from the architecture, state-dict names,
// output shapes, gradients reaching every parameter, train/eval behaviour, argument errors,
// reproducible initialisation, the residual wiring of both block types (against float64
// references and finite differences) and a short memorisation run.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <ember/autograd/grad_mode.h>
#include <ember/autograd/ops.h>
#include <ember/core/error.h>
#include <ember/core/rng.h>
#include <ember/kernels/factory.h>
#include <ember/layers/loss.h>
#include <ember/models/blocks.h>
#include <ember/models/cifar_cnn.h>
#include <ember/models/resnet.h>
#include <ember/models/wide_resnet.h>
#include <ember/optim/sgd.h>
#include "support/gradcheck.h"
#include "support/reference.h"

using namespace ember;
using ember::testing::loose_tol;
using ember::testing::loose_tol_sum;
using ember::testing::random_tensor;
using ember::testing::to_f64;

namespace {

// ---- parameter counts from the architecture, independent of the model code ----
int64_t conv_params(int64_t k, int64_t cin, int64_t cout) { return k * k * cin * cout; }  // no bias
int64_t bn_params(int64_t c) { return 2 * c; }  // weight, bias
int64_t linear_params(int64_t in, int64_t out) { return in * out + out; }

int64_t expected_resnet18(int64_t classes) {
  int64_t p = conv_params(3, 3, 64) + bn_params(64);
  int64_t in = 64;
  for (const int64_t c : {64, 128, 256, 512}) {
    for (int b = 0; b < 2; ++b) {
      const bool downsample = c != 64 && b == 0;
      p += conv_params(3, in, c) + bn_params(c) + conv_params(3, c, c) + bn_params(c);
      if (downsample || in != c) p += conv_params(1, in, c) + bn_params(c);
      in = c;
    }
  }
  return p + linear_params(512, classes);
}

int64_t expected_wrn(int64_t depth, int64_t k, int64_t classes) {
  const int64_t n = (depth - 4) / 6;
  int64_t p = conv_params(3, 3, 16);
  int64_t in = 16;
  for (const int64_t c : {16 * k, 32 * k, 64 * k}) {
    for (int64_t b = 0; b < n; ++b) {
      const bool strided = c != 16 * k && b == 0;
      p += bn_params(in) + conv_params(3, in, c) + bn_params(c) + conv_params(3, c, c);
      if (strided || in != c) p += conv_params(1, in, c);
      in = c;
    }
  }
  return p + bn_params(64 * k) + linear_params(64 * k, classes);
}

int64_t expected_cifar_cnn(int64_t classes) {
  int64_t p = 0, in = 3;
  for (const int64_t c : {32, 64, 128}) {
    p += conv_params(3, in, c) + bn_params(c) + conv_params(3, c, c) + bn_params(c);
    in = c;
  }
  return p + linear_params(128 * 4 * 4, 256) + linear_params(256, classes);
}

int64_t count_params(const layers::Module& m) {
  int64_t n = 0;
  for (const Tensor& p : m.parameters()) n += p.numel();
  return n;
}

std::map<std::string, Shape> param_shapes(const layers::Module& m) {
  std::map<std::string, Shape> out;
  for (const auto& [k, p] : m.named_parameters()) out[k] = p.sizes();
  return out;
}

bool all_finite(const std::vector<double>& v) {
  for (double x : v)
    if (!std::isfinite(x)) return false;
  return true;
}

Tensor labels(int64_t n, int64_t classes, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (auto& t : v) t = static_cast<int64_t>(rng() % static_cast<uint64_t>(classes));
  return from_vector(v, {n});
}

// One loss.backward() in training mode; every parameter must get a finite gradient of its shape
// that is not identically zero (a zero gradient means a branch is disconnected from the loss).
void check_gradients(layers::Module& m, const Shape& x_shape, int64_t classes) {
  m.train();
  const Tensor x = random_tensor(x_shape, DType::f32, 41, -1, 1);
  Tensor loss = layers::cross_entropy(m.forward(x), labels(x_shape[0], classes, 42));
  REQUIRE(std::isfinite(loss.item<double>()));
  loss.backward();
  for (const auto& [k, p] : m.named_parameters()) {
    INFO(k << " " << p.shape_str());
    REQUIRE(p.grad().defined());
    CHECK(p.grad().sizes() == p.sizes());
    const std::vector<double> g = to_f64(p.grad());
    CHECK(all_finite(g));
    bool nonzero = false;
    for (double v : g) nonzero = nonzero || v != 0.0;
    CHECK(nonzero);
  }
}

// True for parameters drawn from the generator (conv / linear weights and biases), false for
// BatchNorm's (constant 1 / 0) and for buffers: a BatchNorm is recognised by its running_mean.
bool is_drawn(const layers::Module& m, const std::string& key) {
  bool param = false;
  for (const auto& [k, p] : m.named_parameters()) param = param || k == key;
  return param && m.state_dict().count(key.substr(0, key.rfind('.') + 1) + "running_mean") == 0;
}

// Every tensor of a and b equal element for element (same_values) or, for the drawn
// parameters, different (buffers and BatchNorm parameters never depend on the seed).
void compare_state(const layers::Module& a, const layers::Module& b, bool same_values) {
  const StateDict sa = a.state_dict(), sb = b.state_dict();
  REQUIRE(sa.size() == sb.size());
  for (const auto& [k, t] : sa) {
    INFO(k);
    REQUIRE(sb.count(k) == 1);
    if (same_values || !is_drawn(a, k)) CHECK(to_f64(t) == to_f64(sb.at(k)));
    else CHECK(to_f64(t) != to_f64(sb.at(k)));
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------------

TEST_CASE("cifar models: parameter counts match the architecture formula and the headers", "[cpu][models]") {
  // The headers' figures, checked against the formula first: if the formula disagreed, the
  // header would be wrong.
  CHECK(expected_resnet18(10) == 11173962);
  CHECK(expected_wrn(28, 10, 10) == 36479194);

  for (const int64_t classes : {10, 100}) {
    INFO(classes << " classes");
    CHECK(count_params(*models::resnet18(classes)) == expected_resnet18(classes));
    CHECK(count_params(*models::cifar_cnn(classes)) == expected_cifar_cnn(classes));
    CHECK(count_params(*models::wide_resnet(16, 2, classes)) == expected_wrn(16, 2, classes));
  }
  CHECK(count_params(*models::wide_resnet(28, 10, 10)) == 36479194);
  CHECK(count_params(*models::wide_resnet(10, 1, 10)) == expected_wrn(10, 1, 10));
  CHECK(count_params(*models::wide_resnet(22, 4, 100, 0.3)) == expected_wrn(22, 4, 100));
}

TEST_CASE("resnet18: state-dict names follow the torchvision-style layout", "[cpu][models]") {
  auto m = models::resnet18(10);
  const auto shapes = param_shapes(*m);
  const std::vector<std::pair<std::string, Shape>> expected = {{"conv1.weight", {64, 3, 3, 3}},
                                                               {"bn1.weight", {64}},
                                                               {"layer1.0.conv1.weight", {64, 64, 3, 3}},
                                                               {"layer1.1.bn2.bias", {64}},
                                                               {"layer2.0.conv1.weight", {128, 64, 3, 3}},
                                                               {"layer2.0.shortcut.0.weight", {128, 64, 1, 1}},
                                                               {"layer2.0.shortcut.1.weight", {128}},
                                                               {"layer3.0.shortcut.0.weight", {256, 128, 1, 1}},
                                                               {"layer4.1.conv2.weight", {512, 512, 3, 3}},
                                                               {"fc.weight", {10, 512}},
                                                               {"fc.bias", {10}}};
  for (const auto& [k, s] : expected) {
    INFO(k);
    REQUIRE(shapes.count(k) == 1);
    CHECK(shapes.at(k) == s);
  }
  // Identity shortcuts carry no state; every BatchNorm has its running statistics.
  CHECK(shapes.count("layer1.0.shortcut.0.weight") == 0);
  CHECK(shapes.count("layer2.1.shortcut.0.weight") == 0);
  const StateDict sd = m->state_dict();
  CHECK(sd.count("layer2.0.shortcut.1.running_var") == 1);
  CHECK(sd.count("bn1.num_batches_tracked") == 1);
  // 1 stem + 8 blocks * 2 + 3 projection BatchNorms, 5 entries each (2 parameters, 3 buffers).
  CHECK(m->named_buffers().size() == (1 + 16 + 3) * 3);
  CHECK(m->named_parameters().front().first == "conv1.weight");
  CHECK(m->named_parameters().back().first == "fc.bias");
}

TEST_CASE("wide_resnet and cifar_cnn: state-dict names", "[cpu][models]") {
  auto w = models::wide_resnet(28, 10, 10);
  const auto ws = param_shapes(*w);
  const std::vector<std::pair<std::string, Shape>> wide = {{"conv1.weight", {16, 3, 3, 3}},
                                                           {"block1.layer.0.bn1.weight", {16}},
                                                           {"block1.layer.0.conv1.weight", {160, 16, 3, 3}},
                                                           {"block1.layer.0.shortcut.weight", {160, 16, 1, 1}},
                                                           {"block1.layer.3.conv2.weight", {160, 160, 3, 3}},
                                                           {"block2.layer.0.shortcut.weight", {320, 160, 1, 1}},
                                                           {"block3.layer.0.conv1.weight", {640, 320, 3, 3}},
                                                           {"bn.weight", {640}},
                                                           {"fc.weight", {10, 640}}};
  for (const auto& [k, s] : wide) {
    INFO(k);
    REQUIRE(ws.count(k) == 1);
    CHECK(ws.at(k) == s);
  }
  CHECK(ws.count("block1.layer.1.shortcut.weight") == 0);
  CHECK(ws.count("block1.layer.4.bn1.weight") == 0);  // n = (28 - 4) / 6 = 4 blocks per group
  // Widen 1: the first group keeps 16 channels at stride 1, so its first block needs no projection.
  CHECK(param_shapes(*models::wide_resnet(10, 1)).count("block1.layer.0.shortcut.weight") == 0);

  const auto cs = param_shapes(*models::cifar_cnn(100));
  const std::vector<std::pair<std::string, Shape>> cnn = {
      {"features.0.weight", {32, 3, 3, 3}},  {"features.1.weight", {32}},
      {"features.7.weight", {64, 32, 3, 3}}, {"features.17.weight", {128, 128, 3, 3}},
      {"classifier.2.weight", {256, 2048}},  {"classifier.5.weight", {100, 256}},
      {"classifier.5.bias", {100}}};
  for (const auto& [k, s] : cnn) {
    INFO(k);
    REQUIRE(cs.count(k) == 1);
    CHECK(cs.at(k) == s);
  }
  CHECK(cs.size() == 6 + 6 * 2 + 4);  // six convs, six BatchNorms, two linears
}

TEST_CASE("cifar models: output shapes for 32x32 (and ResNet-18 on 64x64) inputs", "[cpu][models]") {
  NoGradGuard no_grad;
  const Tensor x32 = random_tensor({2, 3, 32, 32}, DType::f32, 1, -1, 1);
  for (const int64_t classes : {10, 100}) {
    INFO(classes << " classes");
    const std::vector<std::pair<std::string, std::shared_ptr<layers::Module>>> nets = {
        {"cifar_cnn", models::cifar_cnn(classes)},
        {"resnet18", models::resnet18(classes)},
        {"wide_resnet(10, 1)", models::wide_resnet(10, 1, classes)},
        {"wide_resnet(16, 2, dropout 0.3)", models::wide_resnet(16, 2, classes, 0.3)}};
    for (const auto& [name, m] : nets) {
      INFO(name);
      for (const bool training : {true, false}) {
        m->train(training);
        const Tensor y = m->forward(x32);
        CHECK(y.sizes() == Shape{2, classes});
        CHECK(all_finite(to_f64(y)));
      }
    }
  }
  // The adaptive pool makes ResNet-18 size-agnostic: 64x64 ends at 8x8 before pooling.
  auto r = models::resnet18(10);
  const Tensor y64 = r->forward(random_tensor({2, 3, 64, 64}, DType::f32, 2, -1, 1));
  CHECK(y64.sizes() == Shape{2, 10});
  CHECK(all_finite(to_f64(y64)));
  // The CNN's classifier expects 128 * 4 * 4 features: a 64x64 input is an error naming shapes.
  CHECK_THROWS_AS(models::cifar_cnn(10)->forward(random_tensor({1, 3, 64, 64}, DType::f32, 3)), Error);
}

TEST_CASE("cifar models: every parameter receives a finite gradient of its shape", "[cpu][models]") {
  SECTION("cifar_cnn") { check_gradients(*models::cifar_cnn(10, 0.25), {4, 3, 32, 32}, 10); }
  SECTION("resnet18") { check_gradients(*models::resnet18(100), {2, 3, 32, 32}, 100); }
  SECTION("wide_resnet(10, 2, dropout 0.3)") {
    check_gradients(*models::wide_resnet(10, 2, 10, 0.3), {2, 3, 32, 32}, 10);
  }
}

TEST_CASE("cifar models: eval mode is deterministic, dropout is what makes training mode random", "[cpu][models]") {
  NoGradGuard no_grad;
  const Tensor x = random_tensor({4, 3, 32, 32}, DType::f32, 9, -1, 1);
  Generator gen(5);
  const std::vector<std::pair<std::string, std::shared_ptr<layers::Module>>> dropping = {
      {"cifar_cnn(0.5)", models::cifar_cnn(10, 0.5, gen)},
      {"wide_resnet(10, 1, dropout 0.3)", models::wide_resnet(10, 1, 10, 0.3, gen)}};
  for (const auto& [name, m] : dropping) {
    INFO(name);
    m->train();
    const std::vector<double> t1 = to_f64(m->forward(x)), t2 = to_f64(m->forward(x));
    CHECK(t1 != t2);  // fresh dropout masks on every training-mode forward
    m->eval();
    const std::vector<double> e1 = to_f64(m->forward(x)), e2 = to_f64(m->forward(x));
    CHECK(e1 == e2);
    CHECK(e1 != t1);
  }
  // Without dropout, training mode is deterministic too (BatchNorm uses the batch statistics,
  // whatever the running statistics became), so the difference above came from dropout.
  const std::vector<std::pair<std::string, std::shared_ptr<layers::Module>>> plain = {
      {"cifar_cnn(0)", models::cifar_cnn(10, 0.0, gen)},
      {"wide_resnet(10, 1)", models::wide_resnet(10, 1, 10, 0.0, gen)},
      {"resnet18", models::resnet18(10, gen)}};
  for (const auto& [name, m] : plain) {
    INFO(name);
    m->train();
    CHECK(to_f64(m->forward(x)) == to_f64(m->forward(x)));
    m->eval();
    CHECK(to_f64(m->forward(x)) == to_f64(m->forward(x)));
  }
}

TEST_CASE("cifar models: invalid arguments are errors naming the value", "[cpu][models]") {
  using Catch::Matchers::Contains;
  CHECK_THROWS_WITH(models::wide_resnet(27, 1), Contains("depth") && Contains("got 27"));
  CHECK_THROWS_WITH(models::wide_resnet(4, 1), Contains("depth") && Contains("got 4"));  // k = 0
  CHECK_THROWS_WITH(models::wide_resnet(-2, 1), Contains("got -2"));
  CHECK_THROWS_WITH(models::wide_resnet(28, 0), Contains("widen") && Contains("got 0"));
  CHECK_THROWS_WITH(models::wide_resnet(28, 10, 10, 1.0), Contains("dropout") && Contains("got 1"));
  CHECK_THROWS_WITH(models::wide_resnet(28, 10, 10, -0.5), Contains("dropout") && Contains("got -0.5"));
  CHECK_THROWS_WITH(models::wide_resnet(16, 1, 0), Contains("num_classes") && Contains("got 0"));
  CHECK_THROWS_WITH(models::resnet18(0), Contains("num_classes") && Contains("got 0"));
  CHECK_THROWS_WITH(models::cifar_cnn(-3), Contains("num_classes") && Contains("got -3"));
  CHECK_THROWS_WITH(models::cifar_cnn(10, 1.0), Contains("dropout") && Contains("got 1"));
  CHECK_THROWS_AS(models::wide_resnet(27, 1), Error);
  // A block fed the wrong channel count names both.
  models::BasicBlock block(8, 16, 2);
  CHECK_THROWS_WITH(block.forward(random_tensor({1, 3, 8, 8}, DType::f32, 1)),
                    Contains("(N, 8, H, W)") && Contains("[1, 3, 8, 8]"));
}

TEST_CASE("cifar models: the same seed gives the same initial state, another seed another one", "[cpu][models]") {
  SECTION("cifar_cnn") {
    Generator a(7), b(7), c(8);
    compare_state(*models::cifar_cnn(10, 0.25, a), *models::cifar_cnn(10, 0.25, b), true);
    compare_state(*models::cifar_cnn(10, 0.25, a), *models::cifar_cnn(10, 0.25, c), false);
  }
  SECTION("resnet18") {
    Generator a(7), b(7), c(8);
    compare_state(*models::resnet18(10, a), *models::resnet18(10, b), true);
    compare_state(*models::resnet18(10, a), *models::resnet18(10, c), false);
  }
  SECTION("wide_resnet(16, 2)") {
    Generator a(7), b(7), c(8);
    compare_state(*models::wide_resnet(16, 2, 10, 0.3, a), *models::wide_resnet(16, 2, 10, 0.3, b), true);
    compare_state(*models::wide_resnet(16, 2, 10, 0.3, a), *models::wide_resnet(16, 2, 10, 0.3, c), false);
  }
  SECTION("BatchNorm starts at weight 1, bias 0") {
    auto m = models::wide_resnet(10, 2);
    int bn_params_seen = 0;
    for (const auto& [k, p] : m->named_parameters()) {
      if (is_drawn(*m, k)) continue;
      INFO(k);
      ++bn_params_seen;
      const bool weight = k.substr(k.rfind('.')) == ".weight";
      CHECK(to_f64(p) == std::vector<double>(static_cast<size_t>(p.numel()), weight ? 1.0 : 0.0));
    }
    CHECK(bn_params_seen == 2 * (3 * 2 + 1));  // two per block in 3 groups of 1, plus the head's
  }
}

// ---- the residual blocks ----

namespace {

template <typename M> std::shared_ptr<M> child(const layers::Module& m, const std::string& name) {
  for (const auto& [k, c] : m.named_children())
    if (k == name) return std::dynamic_pointer_cast<M>(c);
  return nullptr;
}

// Loads `m`'s own state with the named conv weights set to zero.
void zero_weights(layers::Module& m, const std::vector<std::string>& keys) {
  StateDict sd = m.state_dict();
  for (const std::string& k : keys) {
    REQUIRE(sd.count(k) == 1);
    sd[k] = zeros_like(sd.at(k));
  }
  m.load_state_dict(sd);
}

}  // namespace

TEST_CASE("BasicBlock: y = relu(residual + shortcut), identity or projected shortcut", "[cpu][models]") {
  const Tensor x = random_tensor({2, 8, 6, 6}, DType::f32, 31, -1, 1);
  SECTION("identity shortcut: a zero residual branch leaves relu(x) exactly") {
    models::BasicBlock b(8, 8, 1);
    CHECK_FALSE(b.has_projection());
    zero_weights(b, {"conv1.weight", "conv2.weight"});
    // conv -> 0, BatchNorm of an all-zero batch -> 0 (mean 0, weight 1, bias 0), so y = relu(x).
    const std::vector<double> xv = to_f64(x), yv = to_f64(b.forward(x));
    REQUIRE(yv.size() == xv.size());
    for (size_t i = 0; i < xv.size(); ++i) CHECK(yv[i] == std::max(xv[i], 0.0));
  }
  SECTION("projection: the forward is the documented composition of its children") {
    models::BasicBlock b(8, 16, 2);
    REQUIRE(b.has_projection());
    auto conv1 = child<layers::Module>(b, "conv1"), bn1 = child<layers::Module>(b, "bn1");
    auto conv2 = child<layers::Module>(b, "conv2"), bn2 = child<layers::Module>(b, "bn2");
    auto shortcut = child<layers::Module>(b, "shortcut");
    REQUIRE((conv1 && bn1 && conv2 && bn2 && shortcut));
    const Tensor y = b.forward(x);
    CHECK(y.sizes() == Shape{2, 16, 3, 3});
    const Tensor residual = bn2->forward(conv2->forward(relu(bn1->forward(conv1->forward(x)))));
    const Tensor manual = relu(residual + shortcut->forward(x));
    CHECK(to_f64(y) == to_f64(manual));  // same ops on the same values: bit for bit
  }
}

TEST_CASE("PreActBlock: the projection sees the pre-activated input, the identity the raw one", "[cpu][models]") {
  const Tensor x = random_tensor({2, 8, 6, 6}, DType::f32, 32, -1, 1);
  SECTION("identity shortcut: a zero residual branch returns x itself (no ReLU after the sum)") {
    models::PreActBlock b(8, 8, 1, 0.0);
    CHECK_FALSE(b.has_projection());
    zero_weights(b, {"conv1.weight", "conv2.weight"});
    CHECK(to_f64(b.forward(x)) == to_f64(x));
  }
  SECTION("projection: the forward is the documented composition of its children") {
    models::PreActBlock b(8, 16, 2, 0.0);
    REQUIRE(b.has_projection());
    auto bn1 = child<layers::Module>(b, "bn1"), conv1 = child<layers::Module>(b, "conv1");
    auto bn2 = child<layers::Module>(b, "bn2"), conv2 = child<layers::Module>(b, "conv2");
    auto shortcut = child<layers::Module>(b, "shortcut");
    REQUIRE((bn1 && conv1 && bn2 && conv2 && shortcut));
    const Tensor y = b.forward(x);
    CHECK(y.sizes() == Shape{2, 16, 3, 3});
    const Tensor a = relu(bn1->forward(x));
    const Tensor manual = conv2->forward(relu(bn2->forward(conv1->forward(a)))) + shortcut->forward(a);
    CHECK(to_f64(y) == to_f64(manual));
    // Projecting the raw x instead would give another result: the test can tell the two apart.
    CHECK(to_f64(y) != to_f64(conv2->forward(relu(bn2->forward(conv1->forward(a)))) + shortcut->forward(x)));
  }
}

TEST_CASE("residual blocks: float64 input gradients match finite differences", "[cpu][models]") {
  // Training mode: the BatchNorms differentiate through the batch statistics as well.
  struct Case {
    std::string name;
    std::shared_ptr<layers::Module> block;
    int64_t in;
  };
  const std::vector<Case> cases = {
      {"BasicBlock(3, 4, stride 2)", std::make_shared<models::BasicBlock>(3, 4, 2), 3},
      {"BasicBlock(3, 3, stride 1)", std::make_shared<models::BasicBlock>(3, 3, 1), 3},
      {"PreActBlock(3, 4, stride 2)", std::make_shared<models::PreActBlock>(3, 4, 2, 0.0), 3},
      {"PreActBlock(3, 3, stride 1)", std::make_shared<models::PreActBlock>(3, 3, 1, 0.0), 3}};
  for (const Case& c : cases) {
    INFO(c.name);
    c.block->to(DType::f64);
    const auto r = ember::testing::gradcheck([&](const std::vector<Tensor>& in) { return c.block->forward(in[0]); },
                                             {random_tensor({2, c.in, 5, 5}, DType::f64, 33, -1, 1)});
    INFO(r.message);
    CHECK(r.ok);
  }
}

// ---- learning ----

TEST_CASE("cifar_cnn and wide_resnet(10, 1) memorise a fixed batch of random labels", "[cpu][models]") {
  constexpr int64_t kBatch = 32, kClasses = 10, kSteps = 30;
  const Tensor x = random_tensor({kBatch, 3, 32, 32}, DType::f32, 51, -1, 1);
  const Tensor t = labels(kBatch, kClasses, 52);
  // The labels are independent of the images, so a model that has not memorised them can do no
  // better than predict their empirical frequencies: a loss of H(labels). Halving that (and the
  // initial loss) is only possible by fitting individual images.
  double entropy = 0.0;
  {
    std::vector<double> freq(kClasses, 0.0);
    for (double v : to_f64(t)) freq[static_cast<size_t>(v)] += 1.0 / kBatch;
    for (double f : freq)
      if (f > 0) entropy -= f * std::log(f);
  }
  struct Case {
    std::string name;
    std::function<std::shared_ptr<layers::Module>(Generator&)> make;
  };
  const std::vector<Case> cases = {
      {"cifar_cnn", [](Generator& g) { return models::cifar_cnn(kClasses, 0.0, g); }},
      {"wide_resnet(10, 1)", [](Generator& g) { return models::wide_resnet(10, 1, kClasses, 0.0, g); }}};
  for (const Case& c : cases) {
    INFO(c.name);
    Generator gen(53);
    auto m = c.make(gen);
    m->train();
    optim::SGD opt(m->parameters(), {.lr = 0.05, .momentum = 0.9});
    double initial = 0.0, last = 0.0;
    for (int64_t step = 0; step <= kSteps; ++step) {
      opt.zero_grad();
      Tensor loss = layers::cross_entropy(m->forward(x), t);
      last = loss.item<double>();
      if (step == 0) initial = last;
      if (step == kSteps) break;  // the last forward only measures
      loss.backward();
      opt.step();
    }
    INFO("initial loss " << initial << ", after " << kSteps << " steps " << last << ", label entropy " << entropy);
    CHECK(last < 0.5 * initial);
    CHECK(last < 0.5 * entropy);
  }
}
