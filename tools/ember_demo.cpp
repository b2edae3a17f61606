// ember-demo: trains a small MLP with autograd on a synthetic 3-class spiral (2-D points) on
// Device::best() and prints the loss going down and the final accuracy. Everything it uses is
// public API (<ember/ember.h>): tensors, layers::Sequential of Linear/ReLU, layers::cross_entropy,
// backward, optim::SGD, NoGradGuard.
//
//   ember-demo [--steps N] [--lr X] [--device auto|cpu|cuda|cuda:N] [--seed S]
// Exits 2 on a bad command line (naming the flag and the value), 1 when training did not lower the
// loss (so CI can run it as a smoke test).
#include <ember/ember.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <memory>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

using namespace ember;

namespace {

struct Options {
  int steps = 300;
  double lr = 0.1;
  double momentum = 0.9;
  uint64_t seed = 1;
  std::string device = "auto";
};

constexpr const char* kUsage =
    "usage: ember-demo [--steps N] [--lr X] [--device auto|cpu|cuda|cuda:N] [--seed S]\n"
    "Trains a 2-64-64-3 MLP on a synthetic 3-class spiral and prints the loss going down and the\n"
    "final train and held-out accuracy. Exits 1 when training did not lower the loss.\n"
    "\n"
    "options:\n"
    "  --steps N    SGD steps, N >= 1 (default 300)\n"
    "  --lr X       learning rate, X > 0 (default 0.1)\n"
    "  --device D   auto (the first usable GPU, else the CPU), cpu, cuda or cuda:N (default auto)\n"
    "  --seed S     seed of the data and the initial weights (default 1)\n"
    "  -h, --help   this text\n";

[[noreturn]] void usage_error(const std::string& message) {
  std::fprintf(stderr, "ember-demo: %s\n\n%s", message.c_str(), kUsage);
  std::exit(2);
}

// The whole of `text` as a number of type T (from_chars: no sign for unsigned, no trailing junk).
template <typename T> T number(const char* flag, const std::string& text) {
  T v{};
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || text.empty())
    usage_error(std::string(flag) + " '" + text + "' is not " +
                (std::is_floating_point_v<T> ? "a number" : "a whole number in range"));
  return v;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage_error(arg + " needs a value");
      return argv[++i];
    };
    if (arg == "-h" || arg == "--help") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else if (arg == "--steps") {
      o.steps = number<int>("--steps", value());
      if (o.steps < 1) usage_error("--steps " + std::to_string(o.steps) + ": at least 1 step");
    } else if (arg == "--lr") {
      o.lr = number<double>("--lr", value());
      if (!(o.lr > 0) || !std::isfinite(o.lr)) usage_error("--lr " + std::string(argv[i]) + ": must be > 0");
    } else if (arg == "--seed") {
      o.seed = number<uint64_t>("--seed", value());
    } else if (arg == "--device") {
      o.device = value();
      if (o.device != "auto") {
        try {
          (void)Device(o.device).validate();  // a device this machine lacks is the user's input too
        } catch (const Error& e) {
          std::fprintf(stderr, "ember-demo: --device '%s': %s\n", o.device.c_str(), e.message().c_str());
          std::exit(2);
        }
      }
    } else {
      usage_error("unknown flag '" + arg + "'");
    }
  }
  return o;
}

// kClasses interleaved spiral arms of kPerClass noisy points each: not linearly separable, so the
// hidden layers have to do the work. Returns inputs (N, 2) f32 and labels (N) i64 on the CPU.
constexpr int kClasses = 3, kPerClass = 300, kHidden = 64;
void make_spirals(uint64_t seed, Tensor& x, Tensor& y) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> noise(0.0f, 0.2f);
  std::vector<float> xs;
  std::vector<int64_t> ys;
  for (int c = 0; c < kClasses; ++c) {
    for (int i = 0; i < kPerClass; ++i) {
      const float r = static_cast<float>(i) / kPerClass;  // radius 0..1
      const float t = 2.0f * static_cast<float>(c) * 3.14159265f / kClasses + 5.0f * r + noise(rng);
      xs.push_back(r * std::cos(t));
      xs.push_back(r * std::sin(t));
      ys.push_back(c);
    }
  }
  x = from_vector(xs, {kClasses * kPerClass, 2});
  y = from_vector(ys, {kClasses * kPerClass});
}

double accuracy(const Tensor& logits, const Tensor& y) {
  std::vector<int64_t> pred = argmax(logits, 1).to_vector<int64_t>(), want = y.to_vector<int64_t>();
  int64_t hit = 0;
  for (size_t i = 0; i < pred.size(); ++i) hit += pred[i] == want[i];
  return static_cast<double>(hit) / static_cast<double>(pred.size());
}

}  // namespace

int main(int argc, char** argv) {
  const Options opt = parse(argc, argv);
  try {
    const Device dev = opt.device == "auto" ? Device::best() : Device(opt.device);
    std::printf(
        "ember-demo: 2-%d-%d-%d MLP on a %d-class spiral (%d points), device %s, %d steps of SGD "
        "(lr %.2f, momentum %.1f)\n",
        kHidden, kHidden, kClasses, kClasses, kClasses * kPerClass, dev.str().c_str(), opt.steps, opt.lr, opt.momentum);
    // A training set and a held-out test set drawn from the same distribution.
    Tensor x, y, x_test, y_test;
    make_spirals(opt.seed, x, y);
    make_spirals(opt.seed + 1000, x_test, y_test);
    x = x.to(dev), y = y.to(dev), x_test = x_test.to(dev), y_test = y_test.to(dev);

    // (N, 2) -> (N, 64) -> (N, 64) -> logits (N, 3), PyTorch's default init from a seeded generator.
    Generator gen(opt.seed);
    auto model = std::make_shared<layers::Sequential>(std::initializer_list<layers::ModulePtr>{
        std::make_shared<layers::Linear>(2, kHidden, true, gen), std::make_shared<layers::ReLU>(),
        std::make_shared<layers::Linear>(kHidden, kHidden, true, gen), std::make_shared<layers::ReLU>(),
        std::make_shared<layers::Linear>(kHidden, kClasses, true, gen)});
    model->to(dev);
    optim::SGD sgd(model->parameters(), {.lr = opt.lr, .momentum = opt.momentum});

    const auto t0 = std::chrono::steady_clock::now();
    double first_loss = 0, last_loss = 0;
    const int log_every = std::max(1, opt.steps / 10);
    for (int step = 0; step <= opt.steps; ++step) {
      Tensor logits = model->forward(x);
      Tensor loss = layers::cross_entropy(logits, y);
      last_loss = loss.item<float>();
      if (step == 0) first_loss = last_loss;
      if (step % log_every == 0 || step == opt.steps)
        std::printf("step %4d  loss %.4f  train accuracy %5.1f%%\n", step, last_loss, 100.0 * accuracy(logits, y));
      if (step == opt.steps) break;
      sgd.zero_grad();
      loss.backward();
      sgd.step();
    }
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    double train_acc, test_acc;
    {
      NoGradGuard no_grad;
      model->eval();
      train_acc = accuracy(model->forward(x), y);
      test_acc = accuracy(model->forward(x_test), y_test);
    }
    std::printf("final: loss %.4f (from %.4f), accuracy %.1f%% train, %.1f%% held-out test; %.2f s on %s\n", last_loss,
                first_loss, 100.0 * train_acc, 100.0 * test_acc, secs, dev.str().c_str());
    if (!(last_loss < first_loss)) {
      std::printf("ember-demo: training did not lower the loss\n");
      return 1;
    }
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "ember-demo: error: %s\n", error_text(e).c_str());
    return 1;
  }
}
