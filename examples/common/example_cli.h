#pragma once
// example_cli.h: the parts of ember's example programs (examples/mnist, examples/cifar) that are
// the same in each: command-line parsing and usage errors, device choice, evaluation on the test
// split (sharded over the ranks of a multi-process run), the per-epoch text and JSON lines, the
// progress line, and saving/restoring a checkpoint. How a run uses several devices (DataParallel,
// DDP under a launcher, gradient accumulation) is in example_parallel.h beside it.
// Header-only and written against the public API <ember/ember.h> only, so that an example still
// builds on its own against an installed ember (its CMakeLists.txt adds this folder to the include
// path). The training loop itself is not here: each example keeps its own, in view.
#include <ember/ember.h>

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

namespace ember_examples {

// ---------------------------------------------------------------------------------------------
// Command line

/// A bad command line: main() prints the message and the usage text and exits with status 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Missing or unreadable data: main() prints the message alone (it already says how to get the
/// data) and exits with status 1.
struct DataError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// V as a whole decimal integer of at least MIN_VALUE; otherwise a UsageError naming FLAG and V.
inline int64_t parse_int(const std::string& flag, const std::string& v, int64_t min_value) {
  int64_t out = 0;
  auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  if (ec != std::errc() || end != v.data() + v.size()) throw UsageError(flag + " expects an integer, got '" + v + "'");
  if (out < min_value) throw UsageError(flag + " must be at least " + std::to_string(min_value) + ", got " + v);
  return out;
}

/// V as a finite double, or nothing when V is empty, has trailing characters or overflows.
inline std::optional<double> parse_finite_double(const std::string& v) {
  char* end = nullptr;
  errno = 0;
  const double out = std::strtod(v.c_str(), &end);
  if (v.empty() || end != v.c_str() + v.size() || errno == ERANGE || !std::isfinite(out)) return std::nullopt;
  return out;
}

/// V as a number > 0; otherwise a UsageError that says whether V was no number or not positive.
inline double parse_positive_double(const std::string& flag, const std::string& v) {
  const std::optional<double> out = parse_finite_double(v);
  if (!out) throw UsageError(flag + " expects a number, got '" + v + "'");
  if (!(*out > 0)) throw UsageError(flag + " must be positive, got " + v);
  return *out;
}

/// Checks a --device value's spelling (auto, cpu, cuda or cuda:N) and returns it; whether the
/// device exists is pick_device()'s business, after parsing.
inline std::string parse_device_flag(const std::string& v) {
  if (v != "auto" && v != "cpu" && v != "cuda" && v.rfind("cuda:", 0) != 0)
    throw UsageError("--device expects auto, cpu, cuda or cuda:N, got '" + v + "'");
  if (v.rfind("cuda:", 0) == 0) parse_int("--device cuda:N", v.substr(5), 0);
  return v;
}

/// Called with (flag, value) for one flag of the command line; throws UsageError on a bad value.
using FlagHandler = std::function<void(const std::string& flag, const std::string& value)>;

/// One flag of the command line: its name ("--epochs"), its handler, and whether it takes a value
/// (a switch such as --data-parallel does not; its handler gets an empty value).
struct Flag {
  std::string name;
  FlagHandler handler;
  bool takes_value = true;
};

/// Walks argv[1..argc): --help or -h prints USAGE to stdout and exits 0; every other argument must
/// be one of FLAGS, with its value either inline (--flag=value) or as the next argument (none for
/// a switch), and goes to that flag's handler. Unknown flags, missing values, empty values and a
/// value given to a switch are UsageErrors naming the flag.
inline void parse_flags(int argc, char** argv, const std::string& usage, const std::vector<Flag>& flags) {
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i], value;
    if (flag == "--help" || flag == "-h") {
      std::fputs(usage.c_str(), stdout);
      std::exit(0);
    }
    const auto eq = flag.find('=');
    const bool has_inline = flag.rfind("--", 0) == 0 && eq != std::string::npos;
    if (has_inline) {
      value = flag.substr(eq + 1);
      flag = flag.substr(0, eq);
    }
    const Flag* f = nullptr;
    for (const Flag& candidate : flags)
      if (candidate.name == flag) f = &candidate;
    if (f == nullptr) throw UsageError("unknown flag '" + flag + "'");
    if (!f->takes_value) {
      if (has_inline) throw UsageError(flag + " takes no value, got '" + value + "'");
      f->handler(flag, value);
      continue;
    }
    if (!has_inline) {
      if (i + 1 >= argc) throw UsageError(flag + " needs a value");
      value = argv[++i];
    }
    // The handler first: a numeric or enumerated flag says what it expects, which is more useful
    // than "needs a non-empty value"; only the free-text flags (paths) reach the check below.
    f->handler(flag, value);
    if (value.empty()) throw UsageError(flag + " needs a non-empty value");
  }
}

/// The device for a --device value: "auto" is the first usable GPU, else the CPU; any other
/// spelling must be usable in this build and on this machine, or it is a UsageError.
inline ember::Device pick_device(const std::string& spec) {
  if (spec == "auto") return ember::Device::best();
  ember::Device d(spec);
  try {
    d.validate();
  } catch (const ember::Error& e) {
    throw UsageError("--device " + spec + " cannot be used here: " + e.message());
  }
  return d;
}

/// Runs BODY (parsing and training) and turns its exceptions into the examples' exit statuses:
/// 2 for a UsageError (message, blank line, USAGE), 1 for a DataError (message) or any other
/// error ("error: " and the message, ember::error_text: the source location only for a bug or
/// with EMBER_DEBUG=1); each message goes to stderr prefixed with "PROGRAM: ".
template <class Body> int run_main(const char* program, const std::string& usage, Body&& body) {
  try {
    return body();
  } catch (const UsageError& e) {
    std::fprintf(stderr, "%s: %s\n\n%s", program, e.what(), usage.c_str());
    return 2;
  } catch (const DataError& e) {
    std::fprintf(stderr, "%s: %s\n", program, e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: error: %s\n", program, ember::error_text(e).c_str());
    return 1;
  }
}

// ---------------------------------------------------------------------------------------------
// Timing, evaluation and per-epoch output

using Clock = std::chrono::steady_clock;

/// Seconds elapsed since T0.
inline double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

/// Number of scalars in MODEL's parameters.
inline int64_t count_parameters(ember::layers::Module& model) {
  int64_t n = 0;
  for (const ember::Tensor& p : model.parameters()) n += p.numel();
  return n;
}

/// --channels-last: the model's 4-D weights (Module::to) and every input batch laid out
/// channels-last (docs/amp.md, Channels last).
inline void add_channels_last_flag(std::vector<Flag>& flags, bool& on) {
  flags.push_back({"--channels-last", [&on](auto&, auto&) { on = true; }, false});
}
inline std::string channels_last_usage() {
  return "  --channels-last       lay the model's weights and every input batch out channels-last (NHWC in\n"
         "                        memory, what tensor-core convolutions prefer)\n";
}
/// An input batch X in FORMAT (X itself when it already is, or is not 4-D).
inline ember::Tensor in_format(const ember::Tensor& x, ember::MemoryFormat format) {
  return x.dim() == 4 ? x.contiguous(format) : x;
}

/// Mean cross-entropy and accuracy (a fraction) over a test split.
struct EvalResult {
  double loss = 0, accuracy = 0;
};

/// Mean cross-entropy and accuracy over LOADER's examples, in eval mode (BatchNorm's running
/// statistics, no dropout) and without a graph; MODEL is back in train mode afterwards. DEV is
/// where LOADER's batches live. Logits are (B, classes), targets (B) i64.
///
/// Sharded evaluation: when LOADER's sampler is a data::DistributedSampler (this rank's share of
/// the test split) and GROUP is given, each rank counts only the real rows of its share (the
/// padding that evens out the shares comes last and is skipped) and one all-reduce of the totals
/// gives every rank the result over the whole split, each example counted exactly once. Every rank
/// of GROUP must call it (MODEL may be a DistributedDataParallel: its forwards are collective).
/// INPUT_FORMAT: the layout the batches are given to MODEL in (--channels-last).
inline EvalResult evaluate(ember::layers::Module& model, ember::data::DataLoader& loader, ember::Device dev,
                           ember::parallel::ProcessGroup* group = nullptr,
                           ember::MemoryFormat input_format = ember::MemoryFormat::contiguous) {
  using namespace ember;
  const auto* shard = dynamic_cast<const data::DistributedSampler*>(&loader.sampler());
  const int64_t real = shard != nullptr ? shard->real_size() : loader.num_examples();
  model.eval();
  NoGradGuard no_grad;
  Tensor loss_sum = zeros({}, {.dtype = DType::f64, .device = dev}),
         correct = zeros({}, {.dtype = DType::i64, .device = dev});
  int64_t seen = 0, counted = 0;
  for (auto& batch : loader) {
    Tensor logits = model.forward(in_format(batch.input, input_format));  // (B, classes)
    const int64_t rows = parallel::count_real_rows(seen, batch.size(), real);
    seen += batch.size();
    if (rows == 0) continue;  // padding only
    Tensor target = batch.target;
    if (rows < batch.size()) {
      logits = logits.narrow(0, 0, rows);
      target = target.narrow(0, 0, rows);
    }
    const Tensor batch_loss = layers::cross_entropy(logits, target).to(DType::f64);  // 0-d mean
    loss_sum = loss_sum + batch_loss * static_cast<double>(rows);
    correct = correct + sum(eq(argmax(logits, 1), target));
    counted += rows;
  }
  model.train();
  // One device-to-host read per evaluation, not one per batch.
  const parallel::EvalTotals mine{loss_sum.item<double>(), correct.item<int64_t>(), counted};
  const parallel::EvalTotals all = group != nullptr ? parallel::all_reduce_totals(*group, mine) : mine;
  return {all.mean_loss(), all.accuracy()};
}

/// What one epoch measured: the examples print it as a line and append it as JSON.
struct EpochResult {
  int64_t epoch = 0;
  double train_loss = 0;  // mean over the epoch's training images
  EvalResult test;
  double seconds = 0;  // the training pass
  double images_per_second = 0;  // training images / seconds
  double lr = 0;  // at the epoch's first step
  double eval_seconds = 0;  // the test pass
  double loss_scale = 0;  // --precision fp16: the gradient scaler's scale at the epoch's end; 0 otherwise
  int64_t skipped_steps = 0;  // --precision fp16: optimizer steps skipped in the epoch (a gradient not finite)
};

/// "epoch  E/EPOCHS  train_loss ...  images/s", E right-aligned in EPOCH_WIDTH characters; under
/// fp16 followed by "  scale S, N skipped".
inline std::string epoch_line(const EpochResult& r, int64_t epochs, int epoch_width) {
  char buf[512];
  std::snprintf(buf, sizeof(buf),
                "epoch %*lld/%lld  train_loss %.4f  test_loss %.4f  test_acc %.4f  lr %.4g  %.1f s  %.0f images/s",
                epoch_width, static_cast<long long>(r.epoch), static_cast<long long>(epochs), r.train_loss, r.test.loss,
                r.test.accuracy, r.lr, r.seconds, r.images_per_second);
  std::string line = buf;
  if (r.loss_scale > 0) {
    std::snprintf(buf, sizeof(buf), "  scale %g, %lld skipped", r.loss_scale, static_cast<long long>(r.skipped_steps));
    line += buf;
  }
  return line;
}

/// The --metrics-out line: epoch, train_loss, test_loss, test_acc, epoch_seconds,
/// images_per_second, lr, eval_seconds, in that order (tests and scripts read these fields); under
/// fp16 then loss_scale and skipped_steps.
inline std::string json_line(const EpochResult& r) {
  char buf[512];
  std::snprintf(buf, sizeof(buf),
                "{\"epoch\": %lld, \"train_loss\": %.6f, \"test_loss\": %.6f, \"test_acc\": %.4f, "
                "\"epoch_seconds\": %.3f, \"images_per_second\": %.1f, \"lr\": %.6g, \"eval_seconds\": %.3f}",
                static_cast<long long>(r.epoch), r.train_loss, r.test.loss, r.test.accuracy, r.seconds,
                r.images_per_second, r.lr, r.eval_seconds);
  std::string line = buf;
  if (r.loss_scale > 0) {
    line.pop_back();  // the closing brace
    std::snprintf(buf, sizeof(buf), ", \"loss_scale\": %g, \"skipped_steps\": %lld}", r.loss_scale,
                  static_cast<long long>(r.skipped_steps));
    line += buf;
  }
  return line;
}

/// Appends LINE and a newline to the --metrics-out file FILE with one write(2) of the whole line
/// (a crash leaves the line whole or absent), checking the write and the close: a full disk or a
/// failing device is an Error naming FILE and the system's reason, not a lost line.
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

/// "  epoch E: SEEN/TOTAL images, N images/s" rewritten in place on stderr at most once a second,
/// and only when stderr is a terminal, so that logs and pipes get the epoch lines alone.
class ProgressLine {
 public:
  ProgressLine() : enabled_(::isatty(STDERR_FILENO) != 0) {}

  /// Starts timing epoch EPOCH of TOTAL training images.
  void start(int64_t epoch, int64_t total) {
    epoch_ = epoch, total_ = total;
    t0_ = last_report_ = Clock::now();
  }
  /// Reports SEEN images done if a second has passed since the last report.
  void update(int64_t seen) {
    if (!enabled_ || seconds_since(last_report_) <= 1.0) return;
    last_report_ = Clock::now();
    std::fprintf(stderr, "\r  epoch %lld: %lld/%lld images, %.0f images/s ", static_cast<long long>(epoch_),
                 static_cast<long long>(seen), static_cast<long long>(total_),
                 static_cast<double>(seen) / seconds_since(t0_));
  }
  /// Blanks the line before the epoch's summary is printed.
  void clear() const {
    if (enabled_) std::fprintf(stderr, "\r%60s\r", "");
  }

 private:
  bool enabled_;
  int64_t epoch_ = 0, total_ = 0;
  Clock::time_point t0_, last_report_;
};

// ---------------------------------------------------------------------------------------------
// Checkpoints

/// The objects a checkpoint saves and a resume restores; references to the example's own.
struct TrainingState {
  ember::layers::Module& model;
  ember::optim::Optimizer& optimizer;
  ember::optim::LRScheduler& scheduler;
  ember::data::DataLoader& train_loader;  // its sampler's position and shuffling state
  ember::amp::GradScaler& scaler;  // saved and restored when enabled (--precision fp16)
};

/// CK's metadata value for KEY, or FALLBACK when it has none.
inline std::string metadata_or(const ember::serialize::Checkpoint& ck, const std::string& key,
                               const std::string& fallback) {
  auto it = ck.metadata.find(key);
  return it == ck.metadata.end() ? fallback : it->second;
}

/// A checkpoint of S after EPOCH epochs and GLOBAL_STEP optimizer steps, with the default RNG
/// (initialization, shuffling, augmentation, dropout all draw from it) and METADATA.
inline ember::serialize::Checkpoint capture_checkpoint(const TrainingState& s, int64_t epoch, int64_t global_step,
                                                       std::map<std::string, std::string> metadata) {
  ember::serialize::Checkpoint ck;
  ck.model = s.model.state_dict();
  ck.optimizer = s.optimizer.state_dict();
  ck.scheduler = s.scheduler.state_dict();
  ck.sampler = s.train_loader.state_dict();
  if (s.scaler.is_enabled()) ck.grad_scaler = s.scaler.state_dict();
  ember::serialize::capture_rng(ck);
  ck.epoch = epoch;
  ck.global_step = global_step;
  ck.sampler_position = s.train_loader.sampler().position();
  ck.metadata = std::move(metadata);
  return ck;
}

/// The value of SAVED's entry KEY (an i64 tensor of shape [1], as samplers save them), or
/// FALLBACK when there is none.
inline int64_t sampler_entry(const ember::StateDict& saved, const std::string& key, int64_t fallback) {
  auto it = saved.find(key);
  return it == saved.end() ? fallback : it->second.to_vector<int64_t>().at(0);
}

/// Loads SAVED, a sampler's state from a checkpoint, into LOADER. A checkpoint of a
/// multi-process run holds rank 0's DistributedSampler state (with the world size), which resumes
/// every rank of a run of as many processes; one of a single-process run a RandomSampler's. When
/// the number of processes differs, only the epoch is carried over: the examples checkpoint at
/// epoch ends, so the next epoch starts from its beginning, each rank taking its own share of
/// that epoch's order. Returns a note for the user when the number of processes changed, else "".
inline std::string restore_sampler(ember::data::DataLoader& loader, const ember::StateDict& saved) {
  const auto* shard = dynamic_cast<const ember::data::DistributedSampler*>(&loader.sampler());
  const bool saved_shard = saved.count("world_size") != 0;
  if (!saved_shard && shard == nullptr) {
    loader.load_state_dict(saved);  // checks every setting (dataset size, seed)
    return "";
  }
  const int64_t saved_world = sampler_entry(saved, "world_size", 1), world = shard ? shard->world_size() : 1;
  if (saved_shard && shard != nullptr && saved_world == world) {
    loader.load_state_dict(saved);  // rank 0's state resumes every rank: the position is the same
    return "";
  }
  const int64_t position = sampler_entry(saved, "position", 0);
  if (position != 0)
    throw ember::Error("the checkpoint stopped " + std::to_string(position) + " examples into an epoch of a run with " +
                       std::to_string(saved_world) +
                       " process(es); only checkpoints taken at an epoch's end can continue on " +
                       std::to_string(world));
  loader.set_epoch(sampler_entry(saved, "epoch", 0));
  if (saved_world == world) return "";
  return "the checkpoint was written by a run of " + std::to_string(saved_world) + " process(es), this one has " +
         std::to_string(world) + ": the examples are shuffled and shared out differently from here on";
}

/// Loads CK into S and the default RNG: the next epoch then runs as it would have without the
/// interruption (in a multi-process run, on every rank: the model and optimizer state are the
/// plain model's, the same on every rank, and each rank takes its own share of the next epoch).
/// The caller checks CK's metadata first (model, dataset) to give a clear message. The gradient
/// scaler's state is restored when this run scales (fp16) and CK has one (an fp16 run's); a
/// checkpoint without one (fp32 or bf16) starts the scaler afresh. Returns restore_sampler()'s note,
/// and a note on a change of precision ("" when there is none).
inline std::string restore_checkpoint(const TrainingState& s, const ember::serialize::Checkpoint& ck) {
  s.model.load_state_dict(ck.model);
  s.optimizer.load_state_dict(ck.optimizer);
  s.scheduler.load_state_dict(ck.scheduler);
  if (s.scaler.is_enabled() && !ck.grad_scaler.empty()) s.scaler.load_state_dict(ck.grad_scaler);
  std::string note = restore_sampler(s.train_loader, ck.sampler);
  ember::serialize::restore_rng(ck);
  if (s.scaler.is_enabled() && ck.grad_scaler.empty()) {
    char scale[160];
    std::snprintf(scale, sizeof(scale), "the checkpoint has no loss scale (not an fp16 run): the scale starts at %g",
                  s.scaler.scale());
    note += (note.empty() ? "" : "; ") + std::string(scale);
  }
  return note;
}

/// Writes CK as DIR/epoch_<ck.epoch>.ckpt and DIR/last.ckpt, creating DIR when needed.
inline void save_epoch_checkpoints(const ember::serialize::Checkpoint& ck, const std::string& dir) {
  std::filesystem::create_directories(dir);
  const std::filesystem::path d(dir);
  ember::serialize::save_checkpoint(ck, (d / ("epoch_" + std::to_string(ck.epoch) + ".ckpt")).string());
  ember::serialize::save_checkpoint(ck, (d / "last.ckpt").string());
}

/// The end of an epoch: prints R's line, appends its JSON line to METRICS_OUT and writes
/// CHECKPOINT_DIR/epoch_<E>.ckpt and last.ckpt with METADATA plus its test_acc (each only when set).
inline void report_epoch(const EpochResult& r, int64_t epochs, int epoch_width, const std::string& metrics_out,
                         const std::string& checkpoint_dir, const TrainingState& s, int64_t global_step,
                         std::map<std::string, std::string> metadata) {
  std::printf("%s\n", epoch_line(r, epochs, epoch_width).c_str());
  std::fflush(stdout);
  if (!metrics_out.empty()) append_metrics_line(metrics_out, json_line(r));
  if (checkpoint_dir.empty()) return;
  metadata["test_acc"] = std::to_string(r.test.accuracy);
  save_epoch_checkpoints(capture_checkpoint(s, r.epoch, global_step, std::move(metadata)), checkpoint_dir);
}

/// The "resumed from PATH: E epochs done, S steps, lr X" line, X being the next step's rate.
inline void print_resumed(const std::string& path, const ember::serialize::Checkpoint& ck, double lr) {
  std::printf("resumed from %s: %lld epochs done, %lld steps, lr %.6g\n", path.c_str(),
              static_cast<long long>(ck.epoch), static_cast<long long>(ck.global_step), lr);
}

}  // namespace ember_examples
