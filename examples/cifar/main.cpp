// cifar: trains a CIFAR model (cifar_cnn, ResNet-18 or a wide ResNet) on CIFAR-10, CIFAR-100 or a
// generated CIFAR-shaped set, on CPU or GPU, evaluating on the test split after every epoch.
// Written against ember's public API only.
//
//   cifar [--data DIR] [--dataset cifar10|cifar100|synthetic] [--model cifar_cnn|resnet18|wide_resnet]
//         [--depth N] [--widen N] [--epochs N] [--batch-size N] [--lr X] [--device D] [--seed N]
//         [--limit-train N] [--limit-test N] [--workers N] [--checkpoint-dir DIR] [--resume FILE]
//         [--metrics-out FILE]
//
// The recipe is the common CIFAR one: random crop 32 with 4 pixels of zero padding and random
// horizontal flips on the training images (CIFAR only), per-channel normalization; SGD with Nesterov momentum
// 0.9 and weight decay 5e-4; the learning rate follows a cosine from --lr down to 0 over --epochs,
// updated after every optimizer step (CosineAnnealingLR with T_max = epochs x steps per epoch).
// BatchNorm uses its running statistics (eval mode) on the test split. Each epoch prints one line
// and, with --metrics-out, appends one JSON line (the fields of build/bin/mnist's).
//
// Exit status: 0 done, 1 runtime error (missing or unreadable data, failed checkpoint), 2 bad
// command line.
#include <ember/ember.h>

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

using namespace ember;

namespace {

constexpr double kMomentum = 0.9, kWeightDecay = 5e-4;
constexpr int64_t kCropPadding = 4;
constexpr int64_t kTestBatch = 1000;
// Split sizes of CIFAR-10/100, used for the generated set too.
constexpr int64_t kTrainSize = 50000, kTestSize = 10000;
// The generated set is fixed (it does not follow --seed), so runs with different seeds see the
// same data.
constexpr uint64_t kSyntheticSeed = 0;
// wide_resnet's in-block dropout: 0.3, as in the WRN paper's CIFAR runs.
constexpr double kWideResnetDropout = 0.3;

// Per-channel mean and standard deviation of the training pixels (in [0, 1]), the values
// published with the datasets' usual PyTorch recipes. The generated set's pixel is the mean of
// two uniform bytes: mean 0.5, standard deviation sqrt(1/24) ~ 0.2041 on every channel.
const std::vector<float> kCifar10Mean = {0.4914f, 0.4822f, 0.4465f}, kCifar10Std = {0.2470f, 0.2435f, 0.2616f};
const std::vector<float> kCifar100Mean = {0.5071f, 0.4865f, 0.4409f}, kCifar100Std = {0.2673f, 0.2564f, 0.2762f};
const std::vector<float> kSyntheticMean = {0.5f}, kSyntheticStd = {0.2041f};

struct Options {
  std::string data;  // empty: data/<dataset>
  std::string dataset = "cifar10";
  std::string model = "cifar_cnn";
  int64_t depth = 28, widen = 10;
  int64_t epochs = 30;
  int64_t batch_size = 128;
  double lr = 0;  // 0: the model's default (see kUsage)
  std::string device = "auto";
  uint64_t seed = 1;
  int64_t limit_train = 0, limit_test = 0;  // 0: the whole split
  int64_t workers = 2;
  std::string checkpoint_dir, resume, metrics_out;
};

const char* kUsage =
    "usage: cifar [options]\n"
    "  --dataset NAME        cifar10 | cifar100 | synthetic (generated CIFAR-10-shaped images, no files,\n"
    "                        trained without augmentation; default cifar10)\n"
    "  --data DIR            the dataset's binary files (default data/cifar10 or data/cifar100);\n"
    "                        get them with scripts/get-data.sh cifar10 DIR\n"
    "  --model NAME          cifar_cnn | resnet18 | wide_resnet (default cifar_cnn)\n"
    "  --depth N, --widen N  wide_resnet's depth (6k+4) and widening factor (default 28 and 10)\n"
    "  --epochs N            train until epoch N; the cosine schedule spans N epochs (default 30)\n"
    "  --batch-size N        training batch size (default 128)\n"
    "  --lr X                initial learning rate (default 0.05 for cifar_cnn, 0.1 for the ResNets)\n"
    "  --device D            auto|cpu|cuda|cuda:N (default auto: the first GPU when usable, else cpu)\n"
    "  --seed N              seeds initialization, shuffling, augmentation and dropout (default 1)\n"
    "  --limit-train N       train on the first N training images only (default: all)\n"
    "  --limit-test N        evaluate on the first N test images only (default: all)\n"
    "  --workers N           threads collating batches on the CPU path (default 2; on a GPU the\n"
    "                        dataset stays on the device and batches are built there)\n"
    "  --checkpoint-dir DIR  write DIR/epoch_N.ckpt and DIR/last.ckpt after every epoch\n"
    "  --resume FILE         continue from a checkpoint written by --checkpoint-dir\n"
    "  --metrics-out FILE    append one JSON line per epoch to FILE\n"
    "  --help                print this and exit\n";

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

int64_t parse_int(const std::string& flag, const std::string& v, int64_t min_value) {
  int64_t out = 0;
  auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  if (ec != std::errc() || end != v.data() + v.size())
    throw UsageError(flag + " expects an integer, got '" + v + "'");
  if (out < min_value) throw UsageError(flag + " must be at least " + std::to_string(min_value) + ", got " + v);
  return out;
}

double parse_positive_double(const std::string& flag, const std::string& v) {
  char* end = nullptr;
  errno = 0;
  double out = std::strtod(v.c_str(), &end);
  if (v.empty() || end != v.c_str() + v.size() || errno == ERANGE || !std::isfinite(out) || !(out > 0))
    throw UsageError(flag + " expects a positive number, got '" + v + "'");
  return out;
}

std::string one_of(const std::string& flag, const std::string& v, const std::vector<std::string>& allowed) {
  std::string list;
  for (const auto& a : allowed) {
    if (v == a) return v;
    list += (list.empty() ? "" : ", ") + a;
  }
  throw UsageError(flag + " expects one of " + list + ", got '" + v + "'");
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i], value;
    if (flag == "--help" || flag == "-h") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    }
    const auto eq = flag.find('=');
    const bool has_inline = flag.rfind("--", 0) == 0 && eq != std::string::npos;
    if (has_inline) {
      value = flag.substr(eq + 1);
      flag = flag.substr(0, eq);
    }
    static const char* kFlags[] = {"--data",  "--dataset",     "--model",       "--depth",      "--widen",
                                   "--epochs", "--batch-size", "--lr",          "--device",     "--seed",
                                   "--limit-train", "--limit-test", "--workers", "--checkpoint-dir", "--resume",
                                   "--metrics-out"};
    bool known = false;
    for (const char* f : kFlags) known = known || flag == f;
    if (!known) throw UsageError("unknown flag '" + flag + "'");
    if (!has_inline) {
      if (i + 1 >= argc) throw UsageError(flag + " needs a value");
      value = argv[++i];
    }
    if (flag == "--data") o.data = value;
    else if (flag == "--dataset") o.dataset = one_of(flag, value, {"cifar10", "cifar100", "synthetic"});
    else if (flag == "--model") o.model = one_of(flag, value, {"cifar_cnn", "resnet18", "wide_resnet"});
    else if (flag == "--depth") o.depth = parse_int(flag, value, 10);
    else if (flag == "--widen") o.widen = parse_int(flag, value, 1);
    else if (flag == "--epochs") o.epochs = parse_int(flag, value, 1);
    else if (flag == "--batch-size") o.batch_size = parse_int(flag, value, 1);
    else if (flag == "--lr") o.lr = parse_positive_double(flag, value);
    else if (flag == "--seed") o.seed = static_cast<uint64_t>(parse_int(flag, value, 0));
    else if (flag == "--limit-train") o.limit_train = parse_int(flag, value, 1);
    else if (flag == "--limit-test") o.limit_test = parse_int(flag, value, 1);
    else if (flag == "--workers") o.workers = parse_int(flag, value, 0);
    else if (flag == "--checkpoint-dir") o.checkpoint_dir = value;
    else if (flag == "--resume") o.resume = value;
    else if (flag == "--metrics-out") o.metrics_out = value;
    else if (flag == "--device") {
      if (value != "auto" && value != "cpu" && value != "cuda" && value.rfind("cuda:", 0) != 0)
        throw UsageError("--device expects auto, cpu, cuda or cuda:N, got '" + value + "'");
      if (value.rfind("cuda:", 0) == 0) parse_int("--device cuda:N", value.substr(5), 0);
      o.device = value;
    }
    if (value.empty()) throw UsageError(flag + " needs a non-empty value");
  }
  if (o.model == "wide_resnet" && (o.depth - 4) % 6 != 0)
    throw UsageError("--depth must be 6k+4 (10, 16, 22, 28, 40, ...), got " + std::to_string(o.depth));
  if (o.data.empty() && o.dataset != "synthetic") o.data = "data/" + o.dataset;
  if (o.lr == 0) o.lr = o.model == "cifar_cnn" ? 0.05 : 0.1;
  return o;
}

Device pick_device(const std::string& spec) {
  if (spec == "auto") return Device::best();
  Device d(spec);
  try {
    d.validate();
  } catch (const Error& e) {
    throw UsageError("--device " + spec + " cannot be used here: " + e.what());
  }
  return d;
}

struct DataError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Data {
  std::shared_ptr<const data::Dataset> train, test;
  std::vector<float> mean, std;
};

std::shared_ptr<const data::Dataset> limited(std::shared_ptr<const data::Dataset> full, int64_t limit) {
  if (limit <= 0 || limit >= full->size()) return full;
  std::vector<int64_t> idx(static_cast<size_t>(limit));
  for (int64_t i = 0; i < limit; ++i) idx[static_cast<size_t>(i)] = i;
  return std::make_shared<data::Subset>(std::move(full), std::move(idx));
}

// The generated set: one Synthetic of train + test examples (so both splits share the class
// prototypes that make it learnable), the training split first. Only the examples the limits
// keep are generated.
Data synthetic_data(const Options& o) {
  const int64_t n_train = o.limit_train > 0 ? std::min(o.limit_train, kTrainSize) : kTrainSize;
  const int64_t n_test = o.limit_test > 0 ? std::min(o.limit_test, kTestSize) : kTestSize;
  auto all = std::make_shared<data::Synthetic>(n_train + n_test, Shape{3, 32, 32}, 10, kSyntheticSeed);
  std::vector<int64_t> train_idx(static_cast<size_t>(n_train)), test_idx(static_cast<size_t>(n_test));
  for (int64_t i = 0; i < n_train; ++i) train_idx[static_cast<size_t>(i)] = i;
  for (int64_t i = 0; i < n_test; ++i) test_idx[static_cast<size_t>(i)] = n_train + i;
  return {std::make_shared<data::Subset>(all, std::move(train_idx)),
          std::make_shared<data::Subset>(all, std::move(test_idx)), kSyntheticMean, kSyntheticStd};
}

Data load_data(const Options& o) {
  if (o.dataset == "synthetic") return synthetic_data(o);
  const std::string how = "get " + std::string(o.dataset == "cifar10" ? "CIFAR-10" : "CIFAR-100") +
                          " with scripts/get-data.sh " + o.dataset + " " + o.data + " (or pass --data DIR)";
  std::error_code ec;
  if (!std::filesystem::is_directory(o.data, ec))
    throw DataError("data directory '" + o.data + "' does not exist; " + how);
  try {
    Data d;
    if (o.dataset == "cifar10") {
      d.train = std::make_shared<data::Cifar10>(o.data, data::Split::Train);
      d.test = std::make_shared<data::Cifar10>(o.data, data::Split::Test);
      d.mean = kCifar10Mean, d.std = kCifar10Std;
    } else {
      d.train = std::make_shared<data::Cifar100>(o.data, data::Split::Train);
      d.test = std::make_shared<data::Cifar100>(o.data, data::Split::Test);
      d.mean = kCifar100Mean, d.std = kCifar100Std;
    }
    d.train = limited(d.train, o.limit_train);
    d.test = limited(d.test, o.limit_test);
    return d;
  } catch (const Error& e) {
    throw DataError("cannot read the dataset in '" + o.data + "': " + e.what() + "\n" + how);
  }
}

// "cifar_cnn", "resnet18", "wide_resnet-28-10": names the architecture in messages and checkpoints.
std::string model_label(const Options& o) {
  if (o.model != "wide_resnet") return o.model;
  return o.model + "-" + std::to_string(o.depth) + "-" + std::to_string(o.widen);
}

std::shared_ptr<layers::Module> make_model(const Options& o, int64_t classes) {
  if (o.model == "cifar_cnn") return models::cifar_cnn(classes);
  if (o.model == "resnet18") return models::resnet18(classes);
  return models::wide_resnet(o.depth, o.widen, classes, kWideResnetDropout);
}

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

struct EvalResult {
  double loss = 0, accuracy = 0;
};

// Mean cross-entropy and accuracy over the test split (eval mode: BatchNorm's running statistics,
// no dropout; no graph).
EvalResult evaluate(layers::Module& model, data::DataLoader& loader, Device dev) {
  model.eval();
  NoGradGuard no_grad;
  Tensor loss_sum = zeros({}, DType::f64, dev), correct = zeros({}, DType::i64, dev);
  int64_t n = 0;
  for (auto& batch : loader) {
    Tensor logits = model.forward(batch.input);  // (B, classes)
    loss_sum = loss_sum + layers::cross_entropy(logits, batch.target).to(DType::f64) * static_cast<double>(batch.size());
    correct = correct + sum(eq(argmax(logits, 1), batch.target));
    n += batch.size();
  }
  model.train();
  // One device-to-host read per evaluation, not one per batch.
  return {loss_sum.item<double>() / static_cast<double>(n),
          static_cast<double>(correct.item<int64_t>()) / static_cast<double>(n)};
}

std::string json_line(int64_t epoch, double train_loss, const EvalResult& test, double seconds, double ips,
                      double lr, double eval_seconds) {
  char buf[512];
  std::snprintf(buf, sizeof(buf),
                "{\"epoch\": %lld, \"train_loss\": %.6f, \"test_loss\": %.6f, \"test_acc\": %.4f, "
                "\"epoch_seconds\": %.3f, \"images_per_second\": %.1f, \"lr\": %.6g, \"eval_seconds\": %.3f}",
                static_cast<long long>(epoch), train_loss, test.loss, test.accuracy, seconds, ips, lr, eval_seconds);
  return buf;
}

std::string metadata_or(const train::Checkpoint& ck, const std::string& key, const std::string& fallback) {
  auto it = ck.metadata.find(key);
  return it == ck.metadata.end() ? fallback : it->second;
}

// Creates FILE's folder and checks that FILE can be appended to, so that a bad --metrics-out
// fails before training rather than after the first epoch.
void check_metrics_out(const std::string& file) {
  const std::filesystem::path parent = std::filesystem::path(file).parent_path();
  std::error_code ec;
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  std::ofstream m(file, std::ios::app);
  if (!m) throw Error("--metrics-out " + file + ": cannot open it for appending" + (ec ? ": " + ec.message() : ""));
}

int run(const Options& o) {
  const Device dev = pick_device(o.device);
  if (!o.metrics_out.empty()) check_metrics_out(o.metrics_out);
  manual_seed(o.seed);
  const Data d = load_data(o);
  const int64_t classes = d.train->num_classes();

  // On a GPU the whole (u8) dataset stays on the device and batches, augmentation included, are
  // built there; on the CPU worker threads collate and augment the next batches meanwhile.
  const bool resident = dev.is_cuda();
  const int workers = resident ? 0 : static_cast<int>(o.workers);
  const data::Normalize normalize(d.mean, d.std);
  // The generated set's class signal is a fixed per-pixel pattern, which random shifts and flips
  // would destroy: it trains without augmentation.
  const data::Compose train_transform =
      o.dataset == "synthetic"
          ? data::Compose(normalize)
          : data::Compose(data::RandomCrop(32, kCropPadding), data::RandomHorizontalFlip(), normalize);
  data::DataLoader train_loader(d.train, {.batch_size = o.batch_size, .shuffle = true, .workers = workers,
                                          .device = dev, .seed = o.seed, .resident = resident,
                                          .transform = train_transform});
  data::DataLoader test_loader(d.test, {.batch_size = kTestBatch, .shuffle = false, .workers = workers, .device = dev,
                                        .resident = resident, .transform = normalize});

  auto model = make_model(o, classes);
  model->to(dev);
  optim::SGD opt(model->parameters(),
                 {.lr = o.lr, .momentum = kMomentum, .weight_decay = kWeightDecay, .nesterov = true});
  const int64_t steps_per_epoch = train_loader.len();
  optim::CosineAnnealingLR sched(opt, {.T_max = o.epochs * steps_per_epoch});

  int64_t done_epochs = 0, global_step = 0;
  if (!o.resume.empty()) {
    train::Checkpoint ck = train::load_checkpoint(o.resume, dev);
    for (const auto& [key, want] : {std::pair<std::string, std::string>{"model", model_label(o)}, {"dataset", o.dataset}}) {
      const std::string found = metadata_or(ck, key, "?");
      if (found != want)
        throw Error("--resume " + o.resume + ": checkpoint of " + key + " '" + found + "', this run's is '" + want + "'");
    }
    model->load_state_dict(ck.model);
    opt.load_state_dict(ck.optimizer);
    sched.load_state_dict(ck.scheduler);
    train_loader.load_state_dict(ck.sampler);
    train::restore_rng(ck);
    done_epochs = ck.epoch;
    global_step = ck.global_step;
    std::printf("resumed from %s: %lld epochs done, %lld steps, lr %.6g\n", o.resume.c_str(),
                static_cast<long long>(done_epochs), static_cast<long long>(global_step), opt.lr());
  }

  int64_t n_params = 0;
  for (const Tensor& p : model->parameters()) n_params += p.numel();
  std::printf("cifar: %s (%lld parameters) on %s; %s: train %lld images, test %lld%s%s\n", model_label(o).c_str(),
              static_cast<long long>(n_params), dev.str().c_str(), o.dataset.c_str(),
              static_cast<long long>(d.train->size()), static_cast<long long>(d.test->size()),
              o.data.empty() ? "" : " from ", o.data.c_str());
  std::printf("cifar: SGD lr %.6g nesterov momentum %.1f wd %.0e, cosine over %lld epochs (%lld steps); batch %lld\n",
              o.lr, kMomentum, kWeightDecay, static_cast<long long>(o.epochs),
              static_cast<long long>(o.epochs * steps_per_epoch), static_cast<long long>(o.batch_size));
  if (done_epochs >= o.epochs) {
    std::printf("cifar: the checkpoint has %lld epochs done, --epochs %lld: nothing to train\n",
                static_cast<long long>(done_epochs), static_cast<long long>(o.epochs));
    return 0;
  }
  std::fflush(stdout);

  const bool progress = ::isatty(STDERR_FILENO) != 0;
  for (int64_t epoch = done_epochs + 1; epoch <= o.epochs; ++epoch) {
    const double lr = opt.lr();  // at the epoch's first step
    model->train();
    const auto t0 = Clock::now();
    auto last_report = t0;
    Tensor loss_sum = zeros({}, DType::f64, dev);
    int64_t seen = 0;
    for (auto& batch : train_loader) {
      Tensor loss = layers::cross_entropy(model->forward(batch.input), batch.target);  // 0-d
      opt.zero_grad();
      loss.backward();
      opt.step();
      sched.step();  // per step: the cosine is smooth within an epoch
      ++global_step;
      seen += batch.size();
      {
        NoGradGuard no_grad;  // accumulate on the device: no host sync per step
        loss_sum = loss_sum + loss.detach().to(DType::f64) * static_cast<double>(batch.size());
      }
      if (progress && seconds_since(last_report) > 1.0) {
        last_report = Clock::now();
        std::fprintf(stderr, "\r  epoch %lld: %lld/%lld images, %.0f images/s ", static_cast<long long>(epoch),
                     static_cast<long long>(seen), static_cast<long long>(d.train->size()),
                     static_cast<double>(seen) / seconds_since(t0));
      }
    }
    const double train_loss = loss_sum.item<double>() / static_cast<double>(seen > 0 ? seen : 1);  // syncs
    const double seconds = seconds_since(t0);
    if (progress) std::fprintf(stderr, "\r%60s\r", "");
    const auto t1 = Clock::now();
    const EvalResult test = evaluate(*model, test_loader, dev);
    const double eval_seconds = seconds_since(t1);
    const double ips = static_cast<double>(seen) / seconds;

    std::printf("epoch %3lld/%lld  train_loss %.4f  test_loss %.4f  test_acc %.4f  lr %.4g  %.1f s  %.0f images/s\n",
                static_cast<long long>(epoch), static_cast<long long>(o.epochs), train_loss, test.loss, test.accuracy,
                lr, seconds, ips);
    std::fflush(stdout);
    if (!o.metrics_out.empty()) {
      std::ofstream m(o.metrics_out, std::ios::app);
      m << json_line(epoch, train_loss, test, seconds, ips, lr, eval_seconds) << "\n";
      if (!m) throw Error("cannot append to --metrics-out " + o.metrics_out);
    }
    if (!o.checkpoint_dir.empty()) {
      std::filesystem::create_directories(o.checkpoint_dir);
      train::Checkpoint ck;
      ck.model = model->state_dict();
      ck.optimizer = opt.state_dict();
      ck.scheduler = sched.state_dict();
      ck.sampler = train_loader.state_dict();
      train::capture_rng(ck);
      ck.epoch = epoch;
      ck.global_step = global_step;
      ck.sampler_position = train_loader.sampler().position();
      ck.metadata = {{"model", model_label(o)},
                     {"dataset", o.dataset},
                     {"batch_size", std::to_string(o.batch_size)},
                     {"seed", std::to_string(o.seed)},
                     {"limit_train", std::to_string(o.limit_train)},
                     {"data", o.data},
                     {"test_acc", std::to_string(test.accuracy)}};
      const std::filesystem::path dir(o.checkpoint_dir);
      train::save_checkpoint(ck, (dir / ("epoch_" + std::to_string(epoch) + ".ckpt")).string());
      train::save_checkpoint(ck, (dir / "last.ckpt").string());
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(parse(argc, argv));
  } catch (const UsageError& e) {
    std::fprintf(stderr, "cifar: %s\n\n%s", e.what(), kUsage);
    return 2;
  } catch (const DataError& e) {
    std::fprintf(stderr, "cifar: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cifar: error: %s\n", e.what());
    return 1;
  }
}
