// cifar: trains a CIFAR model (cifar_cnn, ResNet-18 or a wide ResNet) on CIFAR-10, CIFAR-100 or a
// generated CIFAR-shaped set, on CPU or GPU, evaluating on the test split after every epoch.
// Written against ember's public API only.
//
//   cifar [--data DIR] [--dataset cifar10|cifar100|synthetic] [--model cifar_cnn|resnet18|wide_resnet]
//         [--depth N] [--widen N] [--epochs N] [--batch-size N] [--lr X] [--device D] [--seed N]
//         [--limit-train N] [--limit-test N] [--workers N] [--checkpoint-dir DIR] [--resume FILE]
//         [--metrics-out FILE] [--precision fp32|bf16|fp16] [--channels-last] [--accumulation-steps N]
//         [--data-parallel [--devices LIST]]
//
// The recipe is the common CIFAR one: random crop 32 with 4 pixels of zero padding and random
// horizontal flips on the training images (CIFAR only), per-channel normalization; SGD with Nesterov momentum
// 0.9 and weight decay 5e-4; the learning rate follows a cosine from --lr down to 0 over --epochs,
// updated after every optimizer step (CosineAnnealingLR with T_max = epochs x steps per epoch).
// BatchNorm uses its running statistics (eval mode) on the test split. Each epoch prints one line
// and, with --metrics-out, appends one JSON line (the fields of build/bin/mnist's).
//
// On several devices (examples/common/example_parallel.h): --data-parallel splits each batch over
// the GPUs (or --devices cpu,cpu) of this process; started by a launcher as one rank of several
// (build/bin/ember-run --nproc-per-node 2 build/bin/cifar, torchrun, srun, mpirun), each process
// trains with DistributedDataParallel on its share of the data, --batch-size images per rank
// (BatchNorm's running statistics are rank 0's, broadcast before every forward), and rank 0
// reports the test accuracy over the whole test split. With --accumulation-steps N the cosine
// counts optimizer steps (one per N batches).
//
// What examples/mnist does the same way (flag parsing, evaluation, the epoch and JSON lines,
// checkpoints, several devices) lives in examples/common/example_cli.h and example_parallel.h;
// the training loop is below.
//
// Exit status: 0 done, 1 runtime error (missing or unreadable data, failed checkpoint), 2 bad
// command line.
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

#include "example_cli.h"  // examples/common: flags, evaluate(), epoch lines, checkpoints
#include "example_parallel.h"  // examples/common: DataParallel, DDP, gradient accumulation
#include "example_precision.h"  // examples/common: --precision (autocast, gradient scaler)

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
  int64_t epochs = 30;
  int64_t batch_size = 128;
  double lr = 0;  // 0: the model's default (see kUsage)
  std::string device = "auto";
  uint64_t seed = 1;
  int64_t limit_train = 0, limit_test = 0;  // 0: the whole split
  int64_t workers = 2;
  std::string checkpoint_dir, resume, metrics_out;
  std::string precision = "fp32";  // --precision (examples/common/example_precision.h)
  bool channels_last = false;  // --channels-last (examples/common/example_cli.h)
  ex::ParallelFlags parallel;
};

const std::string kUsage =
    "usage: cifar [options]\n"
    "  --dataset NAME        cifar10 | cifar100 | synthetic (generated CIFAR-10-shaped images, no files,\n"
    "                        trained without augmentation; default cifar10)\n"
    "  --data DIR            the dataset's binary files (default data/cifar10 or data/cifar100);\n"
    "                        get them with scripts/get-data.sh cifar10 DIR\n"
    "  --model NAME          cifar_cnn | resnet18 | wide_resnet (default cifar_cnn)\n"
    "  --depth N, --widen N  wide_resnet's depth (6k+4) and widening factor (default 28 and 10)\n"
    "  --epochs N            train until epoch N; the cosine schedule spans N epochs (default 30)\n"
    "  --batch-size N        training batch size (default 128; per rank under a launcher)\n"
    "  --lr X                initial learning rate (default 0.05 for cifar_cnn, 0.1 for the ResNets)\n"
    "  --device D            auto|cpu|cuda|cuda:N (default auto: the first GPU when usable, else cpu)\n"
    "  --seed N              seeds initialization, shuffling, augmentation and dropout (default 1)\n"
    "  --limit-train N       train on the first N training images only (default: all)\n"
    "  --limit-test N        evaluate on the first N test images only (default: all)\n"
    "  --workers N           threads collating batches on the CPU path (default 2; on a GPU the\n"
    "                        dataset stays on the device and batches are built there)\n"
    "  --checkpoint-dir DIR  write DIR/epoch_N.ckpt and DIR/last.ckpt after every epoch\n"
    "  --resume FILE         continue from a checkpoint written by --checkpoint-dir\n"
    "  --metrics-out FILE    append one JSON line per epoch to FILE\n" +
    ex::precision_usage() + ex::channels_last_usage() + ex::parallel_usage("cifar");

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

// Each handler gets (flag, value) and stores the checked value; bad values are UsageErrors.
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
      {"--epochs", [&](auto& f, auto& v) { o.epochs = ex::parse_int(f, v, 1); }},
      {"--batch-size", [&](auto& f, auto& v) { o.batch_size = ex::parse_int(f, v, 1); }},
      {"--lr", [&](auto& f, auto& v) { o.lr = parse_lr(f, v); }},
      {"--device", [&](auto&, auto& v) { o.device = ex::parse_device_flag(v); }},
      {"--seed", [&](auto& f, auto& v) { o.seed = static_cast<uint64_t>(ex::parse_int(f, v, 0)); }},
      {"--limit-train", [&](auto& f, auto& v) { o.limit_train = ex::parse_int(f, v, 1); }},
      {"--limit-test", [&](auto& f, auto& v) { o.limit_test = ex::parse_int(f, v, 1); }},
      {"--workers", [&](auto& f, auto& v) { o.workers = ex::parse_int(f, v, 0); }},
      {"--checkpoint-dir", [&](auto&, auto& v) { o.checkpoint_dir = v; }},
      {"--resume", [&](auto&, auto& v) { o.resume = v; }},
      {"--metrics-out", [&](auto&, auto& v) { o.metrics_out = v; }},
  };
  ex::add_precision_flag(flags, o.precision);
  ex::add_channels_last_flag(flags, o.channels_last);
  ex::add_parallel_flags(flags, o.parallel);
  ex::parse_flags(argc, argv, kUsage, flags);
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
    d.train = limited(d.train, o.limit_train);
    d.test = limited(d.test, o.limit_test);
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
  // One device, DataParallel, or one rank of a DDP job (then this joins the job first).
  ex::ParallelRun par = ex::setup_parallel(o.device, o.parallel);
  const Device dev = par.device;
  // fp32, or autocast to bf16 / f16 around each forward (fp16 with a gradient scaler).
  ex::MixedPrecision precision(o.precision, dev.type(), par.group, par.mode == ex::ParallelRun::Mode::data_parallel);
  if (par.is_main() && !o.metrics_out.empty()) ex::check_metrics_out(o.metrics_out);
  manual_seed(o.seed);
  const Data d = load_data(o);
  const int64_t classes = d.train->num_classes();

  // On a GPU the whole (u8) dataset stays on the device and batches, augmentation included, are
  // built there; on the CPU worker threads collate and augment the next batches meanwhile. Under
  // DDP each rank loads its own share of either split (ex::sharded).
  const bool resident = dev.is_cuda();
  const int workers = resident ? 0 : static_cast<int>(o.workers);
  const data::Normalize normalize(d.mean, d.std);
  // The generated set's class signal is a fixed per-pixel pattern, which random shifts and flips
  // would destroy: it trains without augmentation.
  const data::Compose train_transform =
      o.dataset == "synthetic"
          ? data::Compose(normalize)
          : data::Compose(data::RandomCrop(32, kCropPadding), data::RandomHorizontalFlip(), normalize);
  data::DataLoader train_loader(d.train, ex::sharded({.batch_size = o.batch_size,
                                                      .shuffle = true,
                                                      .workers = workers,
                                                      .device = dev,
                                                      .seed = o.seed,
                                                      .resident = resident,
                                                      .transform = train_transform},
                                                     par, d.train->size()));
  data::DataLoader test_loader(d.test, ex::sharded({.batch_size = kTestBatch,
                                                    .shuffle = false,
                                                    .workers = workers,
                                                    .device = dev,
                                                    .resident = resident,
                                                    .transform = normalize},
                                                   par, d.test->size()));

  auto model = make_model(o, classes);
  model->to(dev);
  const MemoryFormat input_format = o.channels_last ? MemoryFormat::channels_last : MemoryFormat::contiguous;
  model->to(input_format);  // 4-D weights; a no-op for contiguous
  // What the loop calls: the model, or its DataParallel / DDP wrapper. The optimizer and the
  // checkpoints use the model itself (the wrappers share its parameters).
  const layers::ModulePtr net = ex::wrap_model(model, par);
  optim::SGD opt(model->parameters(),
                 {.lr = o.lr, .momentum = kMomentum, .weight_decay = kWeightDecay, .nesterov = true});
  const ex::Accumulation accumulation(o.parallel.accumulation_steps, train_loader.len());
  const int64_t steps_per_epoch = accumulation.steps_per_epoch();  // optimizer steps
  optim::CosineAnnealingLR sched(opt, {.T_max = o.epochs * steps_per_epoch});

  // What a checkpoint saves and --resume restores.
  const ex::TrainingState state{*model, opt, sched, train_loader, precision.scaler()};

  int64_t done_epochs = 0, global_step = 0;
  if (!o.resume.empty()) {  // every rank reads it
    serialize::Checkpoint ck = serialize::load_checkpoint(o.resume, dev);
    for (const auto& [key, want] :
         {std::pair<std::string, std::string>{"model", model_label(o)}, {"dataset", o.dataset}}) {
      const std::string found = ex::metadata_or(ck, key, "?");
      if (found != want)
        throw Error("--resume " + o.resume + ": checkpoint of " + key + " '" + found + "', this run's is '" + want +
                    "'");
    }
    const std::string note = ex::restore_checkpoint(state, ck);
    precision.resumed();
    done_epochs = ck.epoch;
    global_step = ck.global_step;
    if (par.is_main()) {
      if (!note.empty()) std::fprintf(stderr, "cifar: note: %s\n", note.c_str());
      ex::print_resumed(o.resume, ck, opt.lr());
    }
  }

  ex::print_parallel_setup("cifar", par);
  if (par.is_main()) {
    std::printf("cifar: %s (%lld parameters) on %s; %s: train %lld images, test %lld%s%s\n", model_label(o).c_str(),
                static_cast<long long>(ex::count_parameters(*model)), dev.str().c_str(), o.dataset.c_str(),
                static_cast<long long>(d.train->size()), static_cast<long long>(d.test->size()),
                o.data.empty() ? "" : " from ", o.data.c_str());
    std::printf("cifar: SGD lr %.6g nesterov momentum %.1f wd %.0e, cosine over %lld epochs (%lld steps); batch %s%s\n",
                o.lr, kMomentum, kWeightDecay, static_cast<long long>(o.epochs),
                static_cast<long long>(o.epochs * steps_per_epoch),
                ex::batch_text(par, o.batch_size, o.parallel.accumulation_steps).c_str(), precision.describe().c_str());
    if (done_epochs >= o.epochs)
      std::printf("cifar: the checkpoint has %lld epochs done, --epochs %lld: nothing to train\n",
                  static_cast<long long>(done_epochs), static_cast<long long>(o.epochs));
    std::fflush(stdout);
  }

  ex::ProgressLine progress;  // on stderr, only when it is a terminal
  for (int64_t epoch = done_epochs + 1; epoch <= o.epochs; ++epoch) {
    const double lr = opt.lr();  // at the epoch's first step
    if (par.distributed()) manual_seed(ex::rank_epoch_seed(o.seed, par.rank(), epoch));  // dropout per rank
    net->train();
    const auto t0 = ex::Clock::now();
    if (par.is_main()) progress.start(epoch, train_loader.num_examples());
    Tensor loss_sum = zeros({}, {.dtype = DType::f64, .device = dev});
    int64_t seen = 0, i = 0;
    for (auto& batch : train_loader) {
      // Zero the gradients, forward, backward (averaged over the ranks under DDP), and every
      // --accumulation-steps batches an optimizer step (ex::train_batch).
      const auto [loss, stepped] = ex::train_batch(*net, opt, par, accumulation, precision, i++, batch, input_format);
      if (stepped) {
        sched.step();  // per step: the cosine is smooth within an epoch
        ++global_step;
      }
      seen += batch.size();
      {
        NoGradGuard no_grad;  // accumulate on the device: no host sync per step
        loss_sum = loss_sum + loss.detach().to(DType::f64) * static_cast<double>(batch.size());
      }
      if (par.is_main()) progress.update(seen);
    }
    const auto [train_loss, trained] = ex::epoch_train_loss(par, loss_sum, seen);  // syncs; all ranks
    const double seconds = ex::seconds_since(t0);
    progress.clear();
    const auto t1 = ex::Clock::now();
    const ex::EvalResult test = ex::evaluate(*net, test_loader, dev, par.eval_group(), input_format);
    const double eval_seconds = ex::seconds_since(t1);

    const ex::EpochResult result{.epoch = epoch,
                                 .train_loss = train_loss,
                                 .test = test,
                                 .seconds = seconds,
                                 .images_per_second = static_cast<double>(trained) / seconds,
                                 .lr = lr,
                                 .eval_seconds = eval_seconds};
    const ex::EpochResult reported = precision.end_epoch(result);  // fp16: adds the loss scale, skips
    if (par.is_main())
      ex::report_epoch(reported, o.epochs, /*epoch_width=*/3, o.metrics_out, o.checkpoint_dir, state, global_step,
                       {{"model", model_label(o)},
                        {"dataset", o.dataset},
                        {"batch_size", std::to_string(o.batch_size)},
                        {"world_size", std::to_string(par.world_size())},
                        {"accumulation_steps", std::to_string(o.parallel.accumulation_steps)},
                        {"precision", o.precision},
                        {"seed", std::to_string(o.seed)},
                        {"limit_train", std::to_string(o.limit_train)},
                        {"data", o.data}});
  }
  ex::finish_parallel(par);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return ex::run_main("cifar", kUsage, [&] { return run(parse(argc, argv)); });
}
