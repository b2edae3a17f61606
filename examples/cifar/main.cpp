// cifar: trains a CIFAR model (cifar_cnn, ResNet-18 or a wide ResNet) on CIFAR-10, CIFAR-100 or a
// generated CIFAR-shaped set, on CPU or GPU, evaluating on the test split after every epoch.
// Written against ember's public API only: the data, the model, the optimizer and the schedule
// are built here, and train::Trainer trains them (docs/training.md).
//
//   cifar [--data DIR] [--dataset cifar10|cifar100|synthetic] [--model cifar_cnn|resnet18|wide_resnet]
//         [--depth N] [--widen N] [--epochs N] [--batch-size N] [--lr X] [--device D] [--seed N]
//         [--limit-train N] [--limit-test N] [--workers N] [--checkpoint-dir DIR] [--resume FILE]
//         [--metrics-out FILE] [--profile DIR] [--precision fp32|bf16|fp16] [--channels-last]
//         [--cuda-graphs]
//         [--accumulation-steps N] [--data-parallel [--devices LIST]]
//
// The recipe is the common CIFAR one: random crop 32 with 4 pixels of zero padding and random
// horizontal flips on the training images (CIFAR only), per-channel normalization; SGD with Nesterov momentum
// 0.9 and weight decay 5e-4; the learning rate follows a cosine from --lr down to 0 over --epochs,
// updated after every optimizer step (CosineAnnealingLR with T_max = epochs x steps per epoch).
// BatchNorm uses its running statistics (eval mode) on the test split. Each epoch prints one line
// and, with --metrics-out, appends one JSON line (the fields of build/bin/mnist's).
//
// On several devices (examples/common/example_run.h): --data-parallel splits each batch over
// the GPUs (or --devices cpu,cpu) of this process; started by a launcher as one rank of several
// (build/bin/ember-run --nproc-per-node 2 build/bin/cifar, torchrun, srun, mpirun), each process
// trains with DistributedDataParallel on its share of the data, --batch-size images per rank
// (BatchNorm's running statistics are rank 0's, broadcast before every forward), and rank 0
// reports the test accuracy over the whole test split. With --accumulation-steps N the cosine
// counts optimizer steps (one per N batches).
//
// Exit status: 0 done, 1 runtime error (missing or unreadable data, failed checkpoint), 2 bad
// command line, 128 + N after signal N (SIGTERM, SIGINT: last.ckpt is written first).
#include <ember/ember.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "example_cli.h"  // examples/common: flag parsing, exit statuses
#include "example_run.h"  // examples/common: the flags of every run, the parallel set-up, --metrics-out

using namespace ember;
namespace ex = ember_examples;

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
  double lr = 0;  // 0: the model's default (see usage)
  int64_t workers = 2;
  ex::RunFlags run{.epochs = 30, .batch_size = 128};  // --epochs, --device, ... (examples/common/example_run.h)
};

std::string usage(const Options& o) {
  return "usage: cifar [options]\n"
         "  --dataset NAME        cifar10 | cifar100 | synthetic (generated CIFAR-10-shaped images, no files,\n"
         "                        trained without augmentation; default cifar10)\n"
         "  --data DIR            the dataset's binary files (default data/cifar10 or data/cifar100);\n"
         "                        get them with scripts/get-data.sh cifar10 DIR\n"
         "  --model NAME          cifar_cnn | resnet18 | wide_resnet (default cifar_cnn)\n"
         "  --depth N, --widen N  wide_resnet's depth (6k+4) and widening factor (default 28 and 10)\n"
         "  --lr X                initial learning rate (default 0.05 for cifar_cnn, 0.1 for the ResNets); a\n"
         "                        cosine takes it to 0 over --epochs\n"
         "  --workers N           threads collating batches on the CPU path (default 2; on a GPU the\n"
         "                        dataset stays on the device and batches are built there)\n" +
         ex::run_usage("cifar", o.run);
}

std::string one_of(const std::string& flag, const std::string& v, const std::vector<std::string>& allowed) {
  std::string list;
  for (const auto& a : allowed) {
    if (v == a) return v;
    list += (list.empty() ? "" : ", ") + a;
  }
  throw ex::UsageError(flag + " expects one of " + list + ", got '" + v + "'");
}

// --lr's check, worded as this example always has (mnist's says "expects a number" and "must be
// positive" apart).
double parse_lr(const std::string& flag, const std::string& v) {
  const std::optional<double> lr = ex::parse_finite_double(v);
  if (!lr || !(*lr > 0)) throw ex::UsageError(flag + " expects a positive number, got '" + v + "'");
  return *lr;
}

Options parse(int argc, char** argv) {
  Options o;
  std::vector<ex::Flag> flags = {
      {"--data", [&](auto&, auto& v) { o.data = v; }},
      {"--dataset",
       [&](auto& f, auto& v) {
         o.dataset = one_of(f, v, {"cifar10", "cifar100", "synthetic"});
       }},
      {"--model",
       [&](auto& f, auto& v) {
         o.model = one_of(f, v, {"cifar_cnn", "resnet18", "wide_resnet"});
       }},
      {"--depth", [&](auto& f, auto& v) { o.depth = ex::parse_int(f, v, 10); }},
      {"--widen", [&](auto& f, auto& v) { o.widen = ex::parse_int(f, v, 1); }},
      {"--lr", [&](auto& f, auto& v) { o.lr = parse_lr(f, v); }},
      {"--workers", [&](auto& f, auto& v) { o.workers = ex::parse_int(f, v, 0); }},
  };
  ex::add_run_flags(flags, o.run);
  ex::parse_flags(argc, argv, usage(Options{}), flags);
  if (o.model == "wide_resnet" && (o.depth - 4) % 6 != 0)
    throw ex::UsageError("--depth must be 6k+4 (10, 16, 22, 28, 40, ...), got " + std::to_string(o.depth));
  if (o.data.empty() && o.dataset != "synthetic") o.data = "data/" + o.dataset;
  if (o.lr == 0) o.lr = o.model == "cifar_cnn" ? 0.05 : 0.1;
  return o;
}

struct Data {
  std::shared_ptr<const data::Dataset> train, test;
  std::vector<float> mean, std;
};

// The generated set: one Synthetic of train + test examples (so both splits share the class
// prototypes that make it learnable), the training split first. Only the examples the limits
// keep are generated.
Data synthetic_data(const Options& o) {
  const int64_t n_train = o.run.limit_train > 0 ? std::min(o.run.limit_train, kTrainSize) : kTrainSize;
  const int64_t n_test = o.run.limit_test > 0 ? std::min(o.run.limit_test, kTestSize) : kTestSize;
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
    throw ex::DataError("data directory '" + o.data + "' does not exist; " + how);
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
    d.train = ex::first(d.train, o.run.limit_train);
    d.test = ex::first(d.test, o.run.limit_test);
    return d;
  } catch (const Error& e) {
    throw ex::DataError("cannot read the dataset in '" + o.data + "': " + e.message() + "\n" + how);
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

int run(const Options& o) {
  const ex::RunFlags& r = o.run;
  // One device, DataParallel, or one rank of a DDP job (then this joins the job first).
  train::ParallelRun par = ex::start_parallel(r);
  ex::print_rank("cifar", par);
  const Device dev = par.device;
  manual_seed(r.seed);
  const Data d = load_data(o);

  // On a GPU the whole (u8) dataset stays on the device and batches, augmentation included, are
  // built there; on the CPU worker threads collate and augment the next batches meanwhile. Under
  // DDP each rank loads its own share of either split (ex::sharded).
  const data::Normalize normalize(d.mean, d.std);
  const data::DataLoaderOptions loader{
      .workers = dev.is_cuda() ? 0 : static_cast<int>(o.workers), .device = dev, .resident = dev.is_cuda()};
  data::DataLoaderOptions train_opts = loader, test_opts = loader;
  train_opts.batch_size = r.batch_size, train_opts.shuffle = true, train_opts.seed = r.seed;
  // The generated set's class signal is a fixed per-pixel pattern, which random shifts and flips
  // would destroy: it trains without augmentation.
  train_opts.transform = o.dataset == "synthetic" ? data::Compose(normalize)
                                                  : data::Compose(data::RandomCrop(32, kCropPadding),
                                                                  data::RandomHorizontalFlip(), normalize);
  test_opts.batch_size = kTestBatch, test_opts.transform = data::Compose(normalize);

  train::TrainerParts parts;
  parts.parallel = par;
  parts.model = make_model(o, d.train->num_classes());
  parts.train_loader = std::make_unique<data::DataLoader>(d.train, ex::sharded(train_opts, par, d.train->size()));
  parts.test_loader = std::make_unique<data::DataLoader>(d.test, ex::sharded(test_opts, par, d.test->size()));
  parts.optimizer = std::make_unique<optim::SGD>(
      parts.model->parameters(),
      optim::SGDOptions{.lr = o.lr, .momentum = kMomentum, .weight_decay = kWeightDecay, .nesterov = true});
  // The cosine counts optimizer steps: one per --accumulation-steps batches.
  const int64_t steps = r.epochs * ((parts.train_loader->len() + r.accumulation_steps - 1) / r.accumulation_steps);
  parts.schedule =
      std::make_unique<optim::CosineAnnealingLR>(*parts.optimizer, optim::CosineAnnealingOptions{.T_max = steps});
  char recipe[256];
  std::snprintf(recipe, sizeof recipe,
                "SGD lr %.6g nesterov momentum %.1f wd %.0e, cosine over %lld epochs (%lld steps); %s%s%s", o.lr,
                kMomentum, kWeightDecay, static_cast<long long>(r.epochs), static_cast<long long>(steps),
                o.dataset.c_str(), o.data.empty() ? "" : " from ", o.data.c_str());
  parts.notes.push_back(recipe);

  train::Trainer trainer(std::move(parts), ex::trainer_options("cifar", r, par, model_label(o), o.dataset));
  return trainer.run().exit_code;
}

}  // namespace

int main(int argc, char** argv) {
  return ex::run_main("cifar", usage(Options{}), [&] { return run(parse(argc, argv)); });
}
