#pragma once
// example_run.h: what ember's example programs (examples/mnist, examples/cifar) share around
// train::Trainer: the flags of every run, how the process trains (one device, DataParallel, or
// one DDP rank under a launcher), each rank's share of the data, the Trainer's options from the
// flags, the --metrics-out file and the --tensorboard event file. One program, three ways to run it:
//
//   build/bin/mnist                                          one device (the first GPU, else the CPU)
//   build/bin/mnist --data-parallel [--devices cpu,cpu]      one process, the batch split over devices
//   build/bin/ember-run --nproc-per-node 2 build/bin/mnist   one process per device (DDP)
//
// Under a launcher (ember-run, torchrun, srun, mpirun: docs/launch.md) with more than one rank,
// the process joins the job and trains with DistributedDataParallel on cuda:LOCAL_RANK (or the
// CPU), on its share of each epoch; --batch-size is per rank. Rank 0 prints the epoch lines and
// writes --metrics-out and the checkpoints (they hold the plain model, so a checkpoint resumes on
// any number of processes, from an epoch's end).
//
// Header-only, against ember's installed public headers, like example_cli.h.
#include <ember/ember.h>
#include <ember/parallel/env.h>
#include <ember/train/tensorboard.h>

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "example_cli.h"

namespace ember_examples {

// ---------------------------------------------------------------------------------------------
// The flags of every run

/// The flags both examples take; each example sets its own defaults before parsing.
struct RunFlags {
  int64_t epochs = 10;
  int64_t batch_size = 32;
  std::string device = "auto";
  uint64_t seed = 1;
  int64_t limit_train = 0, limit_test = 0;  // 0: the whole split
  std::string checkpoint_dir = {}, resume = {}, metrics_out = {};
  std::string profile_dir = {};  // --profile DIR: a run directory with profile/ (empty: none)
  std::string tensorboard_dir = {};  // --tensorboard DIR: a TensorBoard event file there (empty: none)
  ember::train::Precision precision = ember::train::Precision::fp32;
  bool channels_last = false;
  bool cuda_graphs = false;  // --cuda-graphs: train.cuda_graphs
  bool data_parallel = false;
  std::vector<std::string> devices = {};  // --devices as spelled (empty: every visible GPU)
  int64_t accumulation_steps = 1;
};

/// --devices LIST: comma-separated cpu, cuda or cuda:N, at least one; otherwise a UsageError.
inline std::vector<std::string> parse_devices_list(const std::string& flag, const std::string& v) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    const size_t comma = v.find(',', start);
    const std::string d = v.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    const bool ok =
        d == "cpu" || d == "cuda" ||
        (d.rfind("cuda:", 0) == 0 && d.size() > 5 && d.find_first_not_of("0123456789", 5) == std::string::npos);
    if (!ok)
      throw UsageError(flag + " expects devices separated by commas (cpu, cuda or cuda:N), e.g. cuda:0,cuda:1 or " +
                       "cpu,cpu; got '" + v + "'");
    out.push_back(d);
    if (comma == std::string::npos) return out;
    start = comma + 1;
  }
}

/// Appends the flags of RunFlags to FLAGS, storing into R.
inline void add_run_flags(std::vector<Flag>& flags, RunFlags& r) {
  using ember::train::Precision;
  const std::vector<Flag> mine = {
      {"--epochs", [&r](auto& f, auto& v) { r.epochs = parse_int(f, v, 1); }},
      {"--batch-size", [&r](auto& f, auto& v) { r.batch_size = parse_int(f, v, 1); }},
      {"--device", [&r](auto&, auto& v) { r.device = parse_device_flag(v); }},
      {"--seed", [&r](auto& f, auto& v) { r.seed = static_cast<uint64_t>(parse_int(f, v, 0)); }},
      {"--limit-train", [&r](auto& f, auto& v) { r.limit_train = parse_int(f, v, 1); }},
      {"--limit-test", [&r](auto& f, auto& v) { r.limit_test = parse_int(f, v, 1); }},
      {"--checkpoint-dir", [&r](auto&, auto& v) { r.checkpoint_dir = v; }},
      {"--resume", [&r](auto&, auto& v) { r.resume = v; }},
      {"--metrics-out", [&r](auto&, auto& v) { r.metrics_out = v; }},
      {"--profile", [&r](auto&, auto& v) { r.profile_dir = v; }},
      {"--tensorboard", [&r](auto&, auto& v) { r.tensorboard_dir = v; }},
      {"--precision",
       [&r](auto& f, auto& v) {
         if (v == "fp32") r.precision = Precision::fp32;
         else if (v == "bf16") r.precision = Precision::bf16;
         else if (v == "fp16") r.precision = Precision::fp16;
         else throw UsageError(f + " expects fp32, bf16 or fp16, got '" + v + "'");
       }},
      {"--channels-last", [&r](auto&, auto&) { r.channels_last = true; }, /*takes_value=*/false},
      {"--cuda-graphs", [&r](auto&, auto&) { r.cuda_graphs = true; }, /*takes_value=*/false},
      {"--accumulation-steps", [&r](auto& f, auto& v) { r.accumulation_steps = parse_int(f, v, 1); }},
      {"--data-parallel", [&r](auto&, auto&) { r.data_parallel = true; }, /*takes_value=*/false},
      {"--devices", [&r](auto& f, auto& v) { r.devices = parse_devices_list(f, v); }},
  };
  flags.insert(flags.end(), mine.begin(), mine.end());
}

/// The usage lines of RunFlags (defaults from R) for PROGRAM ("mnist").
inline std::string run_usage(const std::string& program, const RunFlags& r) {
  const std::string epochs = std::to_string(r.epochs), batch = std::to_string(r.batch_size);
  return "  --epochs N            train until epoch N (default " + epochs +
         ")\n"
         "  --batch-size N        training batch size (default " +
         batch +
         "; per rank under a launcher)\n"
         "  --device D            auto|cpu|cuda|cuda:N (default auto: the first GPU when usable, else cpu)\n"
         "  --seed N              seeds initialization, shuffling, augmentation and dropout (default 1)\n"
         "  --limit-train N       train on the first N training images only (default: all)\n"
         "  --limit-test N        evaluate on the first N test images only (default: all)\n"
         "  --checkpoint-dir DIR  write DIR/epoch_N.ckpt and DIR/last.ckpt after every epoch (and\n"
         "                        last.ckpt mid-epoch on SIGTERM or SIGINT)\n"
         "  --resume FILE         continue from a checkpoint written by --checkpoint-dir\n"
         "  --metrics-out FILE    append one JSON line per epoch to FILE\n"
         "  --tensorboard DIR     write a TensorBoard event file into DIR: every number of the epoch's\n"
         "                        metrics at the global step, the flags as hyperparameters (tensorboard\n"
         "                        --logdir DIR; docs/experiments.md)\n"
         "  --profile DIR         profile batches 3-5 (ember-train's profile.* defaults) and write DIR as a\n"
         "                        run directory, as ember-train does: DIR/profile/trace.json (Chrome trace),\n"
         "                        DIR/profile/ops.md (per-span table), config.json, metrics.jsonl, log.txt,\n"
         "                        checkpoints/ (unless --checkpoint-dir); build/bin/ember-report --profile DIR\n"
         "                        prints the table and the verdict and draws the last kept step\n"
         "  --precision P         fp32 | bf16 | fp16 (default fp32): bf16 and fp16 run the forward and the\n"
         "                        loss under amp::Autocast, fp16 with a dynamic loss scale (amp::GradScaler)\n"
         "  --channels-last       lay the model's weights and every input batch out channels-last (NHWC in\n"
         "                        memory, what tensor-core convolutions prefer)\n"
         "  --cuda-graphs         capture one training step as a CUDA graph after 3 warm-up steps and\n"
         "                        replay it for every batch of the same shape (train.cuda_graphs; a GPU,\n"
         "                        fp32 or bf16, no accumulation; docs/cuda_graphs.md)\n"
         "  --accumulation-steps N\n"
         "                        add up the gradients of N batches before each optimizer step (default 1)\n"
         "  --data-parallel       one process, several devices: split each batch of --batch-size images\n"
         "                        over --devices (parallel::DataParallel)\n"
         "  --devices LIST        with --data-parallel: e.g. cuda:0,cuda:1 or cpu,cpu (default: every\n"
         "                        visible GPU)\n"
         "  --help                print this and exit\n"
         "\n"
         "Several processes (parallel::DistributedDataParallel): start it under a launcher, e.g.\n"
         "  build/bin/ember-run --nproc-per-node 2 build/bin/" +
         program +
         " [options]\n"
         "(or torchrun, srun, mpirun: docs/launch.md; Slurm and HTCondor job files in examples/slurm,\n"
         "examples/htcondor). Each process is one rank on cuda:LOCAL_RANK, or on the CPU when no GPU is\n"
         "visible (or with --device cpu); --batch-size is per rank. Rank 0 prints the epoch lines and\n"
         "writes --metrics-out and the checkpoints; every rank reads --resume.\n";
}

// ---------------------------------------------------------------------------------------------
// How this process trains

/// Checks the device flags of R (bad combinations are UsageErrors, before any rendezvous) and
/// starts the run with train::start_parallel: under a launcher's job of several ranks DDP (this
/// joins the job), with --data-parallel DataParallel, else one device.
inline ember::train::ParallelRun start_parallel(const RunFlags& r) {
  using namespace ember;
  if (!r.devices.empty() && !r.data_parallel)
    throw UsageError("--devices lists the devices of --data-parallel: add --data-parallel");
  std::optional<parallel::RankInfo> info;
  try {
    info = parallel::launcher_rank();
  } catch (const Error& e) {  // a launcher's variables set in part (WORLD_SIZE without RANK, ...)
    throw UsageError(e.message());
  }
  train::ParallelConfig config;
  if (info && info->world_size > 1) {
    if (r.data_parallel)
      throw UsageError("--data-parallel splits batches over the devices of one process, but this process is rank " +
                       std::to_string(info->rank) + " of " + std::to_string(info->world_size) + " (" + info->source +
                       " variables), which trains with DistributedDataParallel: drop --data-parallel");
    if (r.device != "auto" && r.device != "cpu" && r.device != "cuda")
      throw UsageError("--device " + r.device + ": under a launcher each rank takes cuda:LOCAL_RANK; pass --device " +
                       "auto, cuda or cpu");
    if (r.device == "cuda" && cuda_device_count() == 0)
      throw UsageError("--device cuda cannot be used here: " + cuda_unavailable_reason());
    config.mode = train::ParallelMode::ddp;
  } else if (r.data_parallel) {
    if (r.device != "auto")
      throw UsageError("--device " + r.device + " and --data-parallel: give DataParallel's devices with --devices");
    if (r.devices.empty() && cuda_device_count() == 0)
      throw UsageError("--data-parallel without --devices uses every visible GPU, and none is usable here (" +
                       cuda_unavailable_reason() + "); pass --devices cpu,cpu to try it on the CPU");
    for (const std::string& d : r.devices) pick_device(d);  // a UsageError when not usable here
    config.mode = train::ParallelMode::dp;
    config.devices = r.devices;
  } else if (r.device != "auto") {
    pick_device(r.device);
  }
  return train::start_parallel(r.device, config);
}

/// Under DDP, says how PROGRAM's rank runs: on rank 0 the job (world size, launcher, master,
/// backend), on every rank its device (and kernel threads on a CPU).
inline void print_rank(const char* program, const ember::train::ParallelRun& run) {
  if (!run.distributed()) return;
  const ember::parallel::RankInfo& i = run.group->info();
  if (run.is_root())
    std::printf("%s: DistributedDataParallel, world size %d (%s variables; master %s:%d; backend %s)\n", program,
                i.world_size, i.source.c_str(), i.master_addr.c_str(), i.master_port, run.group->backend().c_str());
  std::string threads;
  if (run.device.is_cpu())
    threads = ", " + std::to_string(ember::num_threads()) + " kernel thread(s)" +
              (run.kernel_threads_set > 0 ? "" : " from EMBER_NUM_THREADS");
  std::printf("%s: rank %d of %d on %s (local rank %d of %d%s)\n", program, i.rank, i.world_size,
              run.device.str().c_str(), i.local_rank, i.local_world_size, threads.c_str());
  std::fflush(stdout);
}

/// The first N examples of SET (SET itself for N = 0 or N >= its size): --limit-train, --limit-test.
inline std::shared_ptr<const ember::data::Dataset> first(std::shared_ptr<const ember::data::Dataset> set, int64_t n) {
  if (n <= 0 || n >= set->size()) return set;
  std::vector<int64_t> idx(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) idx[static_cast<size_t>(i)] = i;
  return std::make_shared<ember::data::Subset>(std::move(set), std::move(idx));
}

/// OPTS with, under DDP, this rank's share of the N examples as the sampler (a shuffled share,
/// the same permutation on every rank for OPTS.seed and the epoch, when OPTS.shuffle; else the
/// examples in order, for evaluation: the Trainer counts every test image once); OPTS unchanged
/// otherwise.
inline ember::data::DataLoaderOptions sharded(ember::data::DataLoaderOptions opts, const ember::train::ParallelRun& run,
                                              int64_t n) {
  if (run.mode != ember::train::ParallelMode::ddp) return opts;
  opts.sampler = std::make_shared<ember::data::DistributedSampler>(
      n, run.rank, run.world_size, ember::data::DistributedSamplerOptions{.shuffle = opts.shuffle, .seed = opts.seed});
  opts.shuffle = false;
  return opts;
}

// ---------------------------------------------------------------------------------------------
// --metrics-out

/// The --metrics-out line: epoch, train_loss, test_loss, test_acc, epoch_seconds,
/// images_per_second, lr, eval_seconds, in that order (tests and scripts read these fields); under
/// fp16 then loss_scale and skipped_steps.
inline std::string json_line(const ember::train::EpochMetrics& m) {
  char buf[512];
  std::snprintf(buf, sizeof(buf),
                "{\"epoch\": %lld, \"train_loss\": %.6f, \"test_loss\": %.6f, \"test_acc\": %.4f, "
                "\"epoch_seconds\": %.3f, \"images_per_second\": %.1f, \"lr\": %.6g, \"eval_seconds\": %.3f",
                static_cast<long long>(m.epoch), m.train_loss, m.test_loss, m.test_acc, m.epoch_seconds,
                m.images_per_second, m.lr, m.eval_seconds);
  std::string line = buf;
  if (m.loss_scale > 0) {
    std::snprintf(buf, sizeof(buf), ", \"loss_scale\": %g, \"skipped_steps\": %.0f", m.loss_scale, m.skipped_steps);
    line += buf;
  }
  return line + "}";
}

/// Appends LINE and a newline to FILE with one write(2) of the whole line (a crash leaves the
/// line whole or absent), checking the write and the close: a full disk is an Error naming FILE
/// and the system's reason, not a lost line.
inline void append_metrics_line(const std::string& file, const std::string& line) {
  const std::string text = line + "\n";
  const int fd = ::open(file.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) throw ember::Error("--metrics-out " + file + ": cannot open it for appending: " + std::strerror(errno));
  size_t done = 0;
  int err = 0;
  while (done < text.size()) {
    const ssize_t w = ::write(fd, text.data() + done, text.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      err = w < 0 ? errno : EIO;
      break;
    }
    done += static_cast<size_t>(w);
  }
  if (::close(fd) != 0 && err == 0) err = errno;
  if (err != 0) throw ember::Error("--metrics-out " + file + ": cannot append the epoch's line: " + std::strerror(err));
}

/// Creates FILE's folder and checks that FILE can be appended to, so that a bad --metrics-out
/// fails before training rather than after the first epoch.
inline void check_metrics_out(const std::string& file) {
  const std::filesystem::path parent = std::filesystem::path(file).parent_path();
  std::error_code ec;
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  std::ofstream m(file, std::ios::app);
  if (!m)
    throw ember::Error("--metrics-out " + file + ": cannot open it for appending" + (ec ? ": " + ec.message() : ""));
}

// ---------------------------------------------------------------------------------------------
// The Trainer's options

// ---------------------------------------------------------------------------------------------
// --tensorboard

/// The hyperparameters of a run from its flags (and MODEL and DATASET), for TensorBoard's HPARAMS tab.
inline std::vector<std::pair<std::string, ember::train::HParamValue>> run_hparams(const RunFlags& r,
                                                                                  const std::string& model,
                                                                                  const std::string& dataset) {
  return {{"model", model},
          {"dataset", dataset},
          {"epochs", static_cast<double>(r.epochs)},
          {"batch_size", static_cast<double>(r.batch_size)},
          {"device", r.device},
          {"seed", static_cast<double>(r.seed)},
          {"limit_train", static_cast<double>(r.limit_train)},
          {"limit_test", static_cast<double>(r.limit_test)},
          {"precision", std::string(ember::train::config_name(r.precision))},
          {"channels_last", r.channels_last},
          {"cuda_graphs", r.cuda_graphs},
          {"accumulation_steps", static_cast<double>(r.accumulation_steps)},
          {"data_parallel", r.data_parallel}};
}

/// train::Trainer's options for PROGRAM from R: no run directory (with --profile DIR: DIR is the run
/// directory, profiled as ember-train's profile.enabled does), the lines on stdout prefixed
/// "PROGRAM: ", checkpoints (every epoch_N.ckpt kept, and last.ckpt) in --checkpoint-dir, --resume,
/// and on rank 0 one --metrics-out line per epoch. MODEL and DATASET name what checkpoints hold
/// (a resume from another model's is refused).
inline ember::train::TrainerOptions trainer_options(const std::string& program, const RunFlags& r,
                                                    const ember::train::ParallelRun& run, const std::string& model,
                                                    const std::string& dataset) {
  ember::train::TrainerOptions o;
  o.name = o.program = program;
  o.write_run_dir = !r.profile_dir.empty();
  o.output.run_dir = r.profile_dir;
  o.profile.enabled = !r.profile_dir.empty();
  o.checkpoint_dir = r.checkpoint_dir;
  o.checkpoint.keep_last = 0;
  o.checkpoint.keep_best = false;
  o.checkpoint.resume = r.resume;
  o.epochs = r.epochs;
  o.precision = r.precision;
  o.channels_last = r.channels_last;
  o.cuda_graphs = r.cuda_graphs;
  o.accumulation_steps = r.accumulation_steps;
  o.model_name = model;
  o.dataset_name = dataset;
  if (!r.metrics_out.empty() && run.is_root()) {
    check_metrics_out(r.metrics_out);
    o.on_epoch = [file = r.metrics_out](const ember::train::EpochMetrics& m) {
      append_metrics_line(file, json_line(m));
    };
  }
  if (!r.tensorboard_dir.empty() && run.is_root()) {
    // Created before training (a bad DIR fails at once); the step is the optimizer steps so far, as
    // on_step last saw it; each epoch's scalars are written and flushed at once, so a run stopped by
    // SIGTERM (or killed) leaves a file that reads up to its last epoch.
    auto tb = std::make_shared<ember::train::TensorBoardWriter>(r.tensorboard_dir);
    tb->add_hparams(run_hparams(r, model, dataset));
    tb->flush();
    auto step = std::make_shared<int64_t>(0);
    o.on_step = [step](const ember::train::StepInfo& i) { *step = i.global_step; };
    o.on_epoch = [tb, step, metrics = o.on_epoch](const ember::train::EpochMetrics& m) {
      if (metrics) metrics(m);
      tb->add_epoch(m, *step);
      tb->flush();
    };
  }
  return o;
}

}  // namespace ember_examples
