// Trainer (train/trainer.h): one experiment from a config to a run directory.
//
// Order of the per-epoch writes: metrics.jsonl first, then the checkpoints, then summary.json.
// A crash between them leaves a metrics line whose checkpoint is missing; the resume drops every
// line after the checkpoint's epoch and trains that epoch again, so metrics.jsonl never holds a
// duplicate or a gap (the other order could lose a line for good).
#include <ember/train/trainer.h>

#include <time.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include <ember/autograd/grad_mode.h>
#include <ember/autograd/ops.h>
#include <ember/core/build_info.h>
#include <ember/core/error.h>
#include <ember/core/rng.h>
#include <ember/core/stream.h>
#include <ember/core/thread_pool.h>
#include <ember/data/distributed_sampler.h>
#include <ember/kernels/factory.h>
#include <ember/optim/grad_scaler.h>
#include <ember/parallel/env.h>
#include <ember/parallel/found_inf.h>
#include <ember/parallel/object_collectives.h>
#include <ember/parallel/sharded_eval.h>
#include <ember/parallel/sync_batchnorm.h>
#include <ember/parallel/zero.h>
#include <ember/profiler/gather.h>
#include <ember/profiler/profile.h>
#include <ember/profiler/trace_reader.h>
#include <ember/serialize/checkpoint.h>
#include <ember/train/early_stop.h>
#include <ember/train/factories.h>
#include <ember/train/gpu_monitor.h>
#include <ember/train/graph_step.h>
#include <ember/train/parallel_setup.h>
#include <ember/train/phase_timer.h>
#include <ember/train/progress.h>
#include <ember/train/run_dir.h>
#include <ember/train/run_log.h>
#include <ember/train/signals.h>
#include <ember/train/tensorboard.h>
#include <ember/train/train_step.h>
#include <ember/train/trainer_state.h>

namespace ember::train {

using namespace ember::serialize;  // Checkpoint, save_checkpoint, load_checkpoint, capture_rng, restore_rng

namespace fs = std::filesystem;

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// CPU use so far (EpochMetrics::cpu_seconds and the two beside it): the process's CPU time, the
// thread pool's caller wait, the loader's worker threads' CPU time.
struct CpuUse {
  double process = 0, pool_wait = 0, loader = 0;
  static CpuUse now(const data::DataLoader& loader) {
    timespec ts{};
    ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return {static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9, pool_wait_seconds(),
            loader.worker_cpu_seconds()};
  }
};

template <typename... Args> std::string format(const char* spec, Args... args) {
  char buf[512];
  std::snprintf(buf, sizeof buf, spec, args...);
  return buf;
}

// "gradients 3.26 MB in 2 buckets, the last 2.21 MB": what each step all-reduces (docs/scaling.md's
// G and T_last), the last bucket being the one backward cannot hide.
std::string bucket_text(const parallel::DistributedDataParallel& ddp) {
  double total = 0, last = 0;
  for (const parallel::BucketInfo& b : ddp.buckets()) {
    last = static_cast<double>(b.numel * static_cast<int64_t>(dtype_size(b.dtype))) / 1e6;
    total += last;
  }
  return format("gradients %.2f MB in %zu bucket%s, the last %.2f MB", total, ddp.buckets().size(),
                ddp.buckets().size() == 1 ? "" : "s", last);
}

// "1 epoch", "3 epochs".
std::string count(int64_t n, const std::string& noun) { return std::to_string(n) + " " + noun + (n == 1 ? "" : "s"); }

std::string join_lines(const std::vector<std::string>& lines) {
  std::string out;
  for (const auto& l : lines) out += l + "\n";
  return out;
}

PhaseTotals operator+(PhaseTotals a, const PhaseTotals& b) {
  for (size_t i = 0; i < a.seconds.size(); ++i) a.seconds[i] += b.seconds[i];
  a.steps += b.steps;
  return a;
}

struct EvalResult {
  double loss = 0, accuracy = 0;
};

// One run() call: the objects of the run and the loop over its epochs.
class Session {
 public:
  Session(TrainerParts& parts, const TrainerOptions& options)
      : o_(options),
        paths_(resolve_run_dir(options.name, options.output), options.checkpoint_dir),
        par_(parts.parallel),
        dev_(par_.device),
        train_loader_(*parts.train_loader),
        test_loader_(*parts.test_loader),
        model_(parts.model),
        notes_(parts.notes),
        opt_(*parts.optimizer),
        sched_(parts.schedule.get()),
        sched_per_epoch_(parts.schedule_interval == ScheduleInterval::epoch),
        loss_fn_(parts.loss),
        stopper_(options.early_stop) {}

  /// Opens the run directory, then trains; an error from then on is written to log.txt too.
  TrainOutcome run();

 private:
  TrainOutcome train();
  void open_run_dir();
  void open_run_dir_on_root();
  void build();
  void resume();
  void prune_after_resume(const Checkpoint& ck);
  void write_run_files(const std::string& note);
  bool train_epoch(int64_t epoch, EpochMetrics& m);
  EvalResult evaluate();
  StateDict optimizer_state();
  Checkpoint checkpoint(StateDict optimizer) const;
  void end_epoch(EpochMetrics& m);
  RunSummary summary() const;
  void write_summary() const {
    if (o_.write_run_dir) write_file_atomic(paths_.summary, to_json(summary()));
  }
  /// Whether the run writes checkpoints: into its run directory, or into checkpoint_dir.
  bool checkpoints() const { return o_.write_run_dir || !o_.checkpoint_dir.empty(); }
  /// A line of the trainer's own, after "<program>: ".
  void say(const std::string& text) const { log_->line(o_.program + ": " + text); }
  bool channels_last() const { return o_.channels_last; }
  /// An input batch in the run's memory format (the loaders deliver row-major batches).
  Tensor in_layout(const Tensor& x) const {
    return channels_last() && x.dim() == 4 ? x.contiguous(MemoryFormat::channels_last) : x;
  }
  TrainOutcome stop_for_signal(int64_t epoch, int64_t step, int sig);
  void start_profile();
  void finish_profile();
  void start_tensorboard();
  /// Runs rank 0's file writes; under ddp every rank learns whether they failed (run_on_root).
  void on_root(const std::function<void()>& fn) const {
    if (!par_.distributed()) return fn();
    parallel::run_on_root(*par_.group, [&] {
      fn();
      return std::string();
    });
  }
  void log_final(const RunSummary& s);
  double total_seconds() const { return total_before_ + seconds_since(session_start_); }

  const TrainerOptions& o_;
  RunPaths paths_;
  std::string resume_from_;
  std::vector<std::string> resume_notes_;  // what changed from the checkpoint's run (restore_sampler, the scaler)
  const ParallelRun& par_;
  Device dev_;
  std::unique_ptr<RunLog> log_;
  data::DataLoader &train_loader_, &test_loader_;
  std::shared_ptr<layers::Module> model_;  // what checkpoints hold and the optimizer steps
  const std::vector<std::string>& notes_;  // TrainerParts::notes
  std::shared_ptr<layers::Module> net_;  // what the loop calls: model_, or model_ in DataParallel / DDP
  const data::DistributedSampler* test_shard_ = nullptr;  // ddp: this rank's share of the test split
  parallel::DistributedDataParallel* ddp_ = nullptr;  // net_ under ddp
  int stop_sig_ = 0;  // the stop signal the ranks agreed on (max_over_ranks)
  int64_t skipped_before_epoch_ = 0;  // the scaler's skipped steps before this epoch
  int64_t global_batch_size() const {
    return train_loader_.options().batch_size * par_.processes() * o_.accumulation_steps;
  }
  /// The learning rate the schedule starts from (its warm-up and decay scale this one).
  double base_lr() const { return sched_ != nullptr ? sched_->base_lr() : opt_.lr(); }
  int64_t optimizer_steps_per_epoch() const {
    return (train_loader_.len() + o_.accumulation_steps - 1) / o_.accumulation_steps;
  }
  optim::Optimizer& opt_;
  optim::LRScheduler* sched_;  // nullptr: none
  bool sched_per_epoch_;  // ScheduleInterval::epoch: stepped after each epoch's training pass
  std::function<Tensor(const Tensor&, const Tensor&)> loss_fn_;
  std::unique_ptr<amp::GradScaler> scaler_;  // enabled under precision fp16 only
  EarlyStopping stopper_;
  std::unique_ptr<PhaseTimers> timers_;
  std::unique_ptr<StepRunner> stepper_;
  std::unique_ptr<GraphStep> graph_;  // train.cuda_graphs: the step as a CUDA graph
  std::unique_ptr<Progress> progress_;
  std::unique_ptr<profiler::Profile> profile_;  // profile.enabled: a few steps of this session
  std::unique_ptr<TensorBoardWriter> tb_;  // output.tensorboard, rank 0
  std::unique_ptr<GpuMonitor> gpu_;  // rank 0 on a GPU where NVML loads: the epoch's gpu_* metrics
  profiler::ClockOffset clock_;  // ddp with a profile: this rank's clock against rank 0's
  RunState st_;
  std::vector<std::string> metric_lines_;
  std::string stop_reason_ = "completed", stop_detail_;
  Clock::time_point session_start_ = Clock::now();
  int restarts_ = parallel::restart_count_from_env();  // this session's attempt under ember-run --max-restarts
  double total_before_ = 0;
};

// Decides where the run lives and whether it continues an earlier one, before anything is written.
// Under ddp rank 0 alone looks at and writes the directory, and tells the others where to resume.
void Session::open_run_dir() {
  if (!par_.distributed()) return open_run_dir_on_root();
  resume_from_ = parallel::run_on_root(*par_.group, [this] {
    open_run_dir_on_root();
    return resume_from_;
  });
  if (!par_.is_root()) log_ = std::make_unique<RunLog>("", nullptr);  // rank 0 speaks for the run
}

void Session::open_run_dir_on_root() {
  // Without a run directory a fresh start has no earlier run to protect (checkpoint_dir is the
  // program's to choose).
  const std::string& resume = o_.checkpoint.resume;
  if (o_.write_run_dir || (!resume.empty() && (resume != "auto" || checkpoints())))
    resume_from_ = checkpoint_to_resume(paths_, resume);
  if (checkpoints()) {
    std::error_code ec;
    fs::create_directories(paths_.checkpoints, ec);
    EMBER_CHECK(!ec, "cannot create the checkpoint directory '", paths_.checkpoints, "': ", ec.message());
  }
  log_ = std::make_unique<RunLog>(o_.write_run_dir ? paths_.log : "");
}

void Session::build() {
  model_->to(dev_);
  if (channels_last()) model_->to(MemoryFormat::channels_last);
  net_ = wrap_model(par_, o_.parallel, model_);
  ddp_ = dynamic_cast<parallel::DistributedDataParallel*>(net_.get());
  test_shard_ = dynamic_cast<const data::DistributedSampler*>(&test_loader_.sampler());
  // fp16's narrow range needs the loss scaled (and the step skipped on overflow); bf16 does not.
  scaler_ = std::make_unique<amp::GradScaler>(amp::GradScalerOptions{.enabled = o_.precision == Precision::fp16});
  if (scaler_->is_enabled() && par_.distributed()) scaler_->set_found_inf_sync(parallel::found_inf_sync(par_.group));
  timers_ = std::make_unique<PhaseTimers>(dev_);
  stepper_ = std::make_unique<StepRunner>(
      *net_, *model_, opt_, sched_per_epoch_ ? nullptr : sched_, *scaler_, ddp_, *timers_, dev_,
      StepSettings{
          .precision = o_.precision, .accumulation_steps = o_.accumulation_steps, .clip_grad_norm = o_.clip_grad_norm},
      loss_fn_);
  if (o_.cuda_graphs) {
    // What a captured step cannot hold (the config's rules say the same for ember-train; a user's
    // Trainer is checked here). docs/cuda_graphs.md.
    EMBER_CHECK(dev_.is_cuda(), "train.cuda_graphs: true needs a CUDA device; this run's device is ", dev_.str());
    EMBER_CHECK(par_.mode == ParallelMode::none, "train.cuda_graphs: true is not supported with parallel.mode ",
                config_name(par_.mode), " yet (the gradient reduction is not capturable)");
    EMBER_CHECK(o_.precision != Precision::fp16,
                "train.cuda_graphs: true cannot be used with precision fp16 (its GradScaler reads found_inf on the "
                "host every step); use bf16 or fp32");
    EMBER_CHECK(o_.accumulation_steps == 1, "train.cuda_graphs: true needs train.accumulation_steps 1, found ",
                o_.accumulation_steps);
    EMBER_CHECK(o_.on_nonfinite == NonFinitePolicy::stop,
                "train.cuda_graphs: true needs train.on_nonfinite stop (skip reads each loss before its backward)");
    EMBER_CHECK(!o_.profile.enabled,
                "train.cuda_graphs: true cannot be profiled (profile.enabled): the ops inside "
                "a replay are one launch; profile without CUDA graphs");
    graph_ = std::make_unique<GraphStep>(*stepper_, *timers_, dev_, [this](const std::string& s) { say(s); });
  }
  progress_ = std::make_unique<Progress>(*log_, log_->console_is_terminal(), o_.output.log_interval);
  if (dev_.is_cuda() && par_.is_root()) {
    std::string why;
    if (std::unique_ptr<GpuSource> source = nvml_source(dev_, &why)) {
      gpu_ = std::make_unique<GpuMonitor>(std::move(source));
      log_->file_line("GPU monitor: " + gpu_->describe() + ", sampled at 10 Hz");
    } else {
      log_->file_line("GPU monitor: none (" + why + "): metrics.jsonl has no gpu_* fields");
    }
  }
  int64_t n_params = 0;
  for (const Tensor& p : model_->parameters()) n_params += p.numel();
  say((o_.name == o_.program ? "" : o_.name + ": ") + o_.model_name + " (" + std::to_string(n_params) +
      " parameters) on " + o_.dataset_name + " (" + std::to_string(train_loader_.dataset().size()) + " training, " +
      std::to_string(test_loader_.dataset().size()) + " test images), device " + dev_.str() + ", " +
      count(o_.epochs, "epoch") + " of " + count(optimizer_steps_per_epoch(), "step"));
  if (!par_.note.empty()) say(par_.note);
  for (const std::string& n : notes_) say(n);
  if (restarts_ > 0)
    say("restart " + std::to_string(restarts_) + " of this job (EMBER_RESTART_COUNT)" +
        (o_.checkpoint.resume == "auto" ? "" : " without checkpoint.resume=auto: it does not go on from the last one"));
  if (o_.precision != Precision::fp32)
    say(std::string("mixed precision ") + config_name(o_.precision) + " (autocast; parameters in f32" +
        (scaler_->is_enabled() ? "; loss scale " + format("%g", scaler_->scale()) + ")" : ")"));
  if (par_.mode != ParallelMode::none || o_.accumulation_steps > 1) {
    std::string how = par_.batch_text(train_loader_.options().batch_size, o_.accumulation_steps);
    if (par_.mode == ParallelMode::ddp)
      how += " (DistributedDataParallel over " + par_.group->backend() + ", world size " +
             std::to_string(par_.world_size) + ", collective timeout " + format("%g", par_.group->timeout_s()) +
             " s from " + par_.timeout_source + "; " + bucket_text(*ddp_) + ")";
    if (par_.mode == ParallelMode::dp) how += " (DataParallel)";
    say(how);
  }
  if (o_.parallel.sync_batchnorm)
    say(par_.mode == ParallelMode::ddp
            ? "SyncBatchNorm: " + count(parallel::count_sync_batchnorm(*model_), "BatchNorm2d layer") +
                  " normalize with the statistics of all " + std::to_string(par_.world_size) + " ranks' batches"
            : "parallel.sync_batchnorm has no effect without parallel.mode ddp");
  if (const auto* zero = dynamic_cast<const parallel::ZeroRedundancyOptimizer*>(&opt_))
    say("ZeRO-1: " + zero->name() + " splits the optimizer state over " + std::to_string(par_.world_size) +
        " ranks; rank 0 steps " + std::to_string(zero->shard().size()) + " of " +
        count(static_cast<int64_t>(opt_.params().size()), "parameter tensor"));
  else if (o_.parallel.zero == 1) say("parallel.zero has no effect without parallel.mode ddp");
  if (o_.parallel.comm_hook != "none")
    say(ddp_ ? "gradient compression: " + o_.parallel.comm_hook + " (buckets cast to " +
                   (o_.parallel.comm_hook == "fp16" ? "f16" : "bf16") +
                   " for the all-reduce; the wire carries half the bytes of f32 gradients)"
             : "parallel.comm_hook has no effect without parallel.mode ddp");
  if (o_.write_run_dir) say("run directory " + paths_.dir + ", git " + build_git_commit());
  else if (checkpoints()) say("checkpoints in " + paths_.checkpoints);
}

// Every rank loads the checkpoint; rank 0 alone rewrites the run directory's files.
void Session::resume() {
  if (resume_from_.empty()) {
    if (!o_.write_run_dir) return;
    // resume=auto without a checkpoint: a fresh start, without lines an earlier attempt left.
    on_root([&] {
      std::string note;
      metric_lines_ = metrics_lines_up_to(paths_.metrics, 0, note);
      write_run_files(note);
    });
    return;
  }
  const Checkpoint ck = load_checkpoint(resume_from_, dev_);
  for (const auto& [key, want] : {std::pair<std::string, std::string>{"model", o_.model_name},
                                  std::pair<std::string, std::string>{"dataset", o_.dataset_name}}) {
    auto it = ck.metadata.find(key);
    EMBER_CHECK(it != ck.metadata.end() && it->second == want, "checkpoint.resume: '", resume_from_, "' holds ", key,
                " \"", it == ck.metadata.end() ? std::string("?") : it->second, "\", but this run's is \"", want,
                "\" (", key == "model" ? "model.name" : "data.dataset", ")");
  }
  st_ = RunState::from_metadata(ck.metadata, resume_from_);
  if (!par_.is_root()) st_.partial.loss_sum = 0, st_.partial.images = 0;  // rank 0 holds the epoch's sums
  model_->load_state_dict(ck.model);
  opt_.load_state_dict(ck.optimizer);
  if (sched_) {
    sched_->load_state_dict(ck.scheduler);
  } else {
    EMBER_CHECK(ck.scheduler.empty(), "checkpoint.resume: '", resume_from_,
                "' holds a learning-rate schedule, but the config's schedule.name is none");
  }
  if (std::string note = restore_sampler(train_loader_, ck.sampler); !note.empty()) resume_notes_.push_back(note);
  if (scaler_->is_enabled() && !ck.grad_scaler.empty()) scaler_->load_state_dict(ck.grad_scaler);
  if (scaler_->is_enabled() && ck.grad_scaler.empty())
    resume_notes_.push_back(
        format("the checkpoint has no loss scale (not an fp16 run): the scale starts at %g", scaler_->scale()));
  skipped_before_epoch_ = scaler_->skipped_steps();
  restore_rng(ck);
  st_.epochs_done = ck.epoch;
  st_.global_step = ck.global_step;
  stopper_.set_state(st_.stopper);
  total_before_ = st_.total_seconds;
  on_root([&] { prune_after_resume(ck); });
}

// Metrics of epochs after the checkpoint belong to a timeline that is being replaced. A
// checkpoint from another directory brings that run's earlier lines along.
void Session::prune_after_resume(const Checkpoint& ck) {
  std::string note;
  {
    std::error_code ec;
    const fs::path other = fs::path(resume_from_).parent_path().parent_path() / "metrics.jsonl";
    const std::string source =
        fs::exists(paths_.metrics, ec) || !fs::exists(other, ec) ? paths_.metrics : other.string();
    if (o_.write_run_dir) metric_lines_ = metrics_lines_up_to(source, ck.epoch, note);
    const std::vector<int64_t> pruned =
        checkpoints() ? prune_epoch_checkpoints(paths_.checkpoints, 0, ck.epoch) : std::vector<int64_t>{};
    if (!pruned.empty())
      say("deleted " + std::to_string(pruned.size()) + " epoch checkpoints after epoch " + std::to_string(ck.epoch) +
          " (a timeline the resume replaces)");
    if (o_.output.tensorboard && o_.write_run_dir)
      if (const int64_t n = prune_event_files(paths_.dir, ck.global_step))
        say("TensorBoard: dropped " + std::to_string(n) + " events after global step " +
            std::to_string(ck.global_step) + " from the earlier event files (a timeline the resume replaces)");
    for (const std::string& n : resume_notes_) say("note: " + n);
    say("resumed from " + resume_from_ + ": epochs done " + std::to_string(ck.epoch) +
        (st_.partial.active()
             ? ", " + std::to_string(st_.partial.steps) + " steps into epoch " + std::to_string(ck.epoch + 1)
             : std::string()) +
        ", global step " + std::to_string(ck.global_step));
  }
  if (o_.write_run_dir) write_run_files(note);
}

// Only once the checkpoint has loaded: a failed resume leaves the directory as it was.
void Session::write_run_files(const std::string& note) {
  if (!note.empty()) say(note);
  // config.json also records the batch and learning rate this run trains with, as resolved for
  // its processes (data.global_batch_size, optim.lr_scaling): what a reader cannot work out alone.
  std::string config = o_.config_json(resume_from_);
  if (auto j = nlohmann::ordered_json::parse(config, nullptr, /*allow_exceptions=*/false); j.is_object()) {
    j["resolved"] = {{"processes", par_.processes()},
                     {"batch_size_per_process", train_loader_.options().batch_size},
                     {"accumulation_steps", o_.accumulation_steps},
                     {"global_batch_size", global_batch_size()},
                     {"lr", base_lr()}};
    config = j.dump(2) + "\n";
  }
  write_file_atomic(paths_.config, config);
  write_file_atomic(paths_.metrics, join_lines(metric_lines_));
}

// One training pass over the rest of the epoch: batches through the StepRunner, the non-finite
// policy, progress lines, stop signals; then the epoch's metrics (make_epoch_metrics). Returns
// false when a stop signal ended it early (the partial sums are then in st_.partial).
bool Session::train_epoch(int64_t epoch, EpochMetrics& m) {
  RunState::Partial& part = st_.partial;
  if (!part.active()) {
    part = {};
    part.lr = opt_.lr();
  }
  net_->train();
  // The running loss stays on the device: reading it would synchronise every step.
  Tensor loss_sum = full({}, part.loss_sum, {.dtype = DType::f64, .device = dev_});
  int64_t step = part.steps, images = part.images, dropped_images = 0;
  const int64_t steps = train_loader_.len();
  data::Sampler& sampler = train_loader_.sampler();
  progress_->begin_epoch(epoch, o_.epochs, steps);
  const auto t0 = Clock::now();
  const CpuUse cpu0 = CpuUse::now(train_loader_);
  if (gpu_) gpu_->take();  // the readings since the last epoch's training pass (its evaluation) are not this epoch's
  bool interrupted = false;
  NonFiniteWatch nonfinite(o_.on_nonfinite, par_, dev_);
  bool h2d_copied = part.phases[Phase::HostToDevice] > 0;  // a resumed epoch's earlier copies

  timers_->begin(Phase::DataWait);
  auto it = train_loader_.begin();
  timers_->end(Phase::DataWait);
  while (!(it == train_loader_.end())) {
    data::Batch& batch = *it;
    Tensor input = in_layout(batch.input), target = batch.target;
    if (input.device() != dev_ || target.device() != dev_) {
      // Only a loader that delivers elsewhere (a user's, on the host) is copied, and timed, here.
      // ember's loaders deliver on dev_ (host mode: pinned buffers and an async copy on a side
      // stream, its wait counted as data wait; resident mode: gathered on the device), so the
      // epoch then has no h2d time at all rather than a measured-looking 0 (EpochMetrics).
      auto scope = timers_->scope(Phase::HostToDevice);
      input = input.to(dev_);
      target = target.to(dev_);
      h2d_copied = true;
    }
    // Gradient accumulation: the optimizer steps after every accumulation_steps-th batch and after
    // the epoch's last. Stops happen only at optimizer steps.
    const bool steps_now = (step + 1) % o_.accumulation_steps == 0 || sampler.position() >= sampler.size();
    const auto after_forward = [&](const Tensor& l) { return nonfinite.after_forward(l, step + 1, steps_now); };
    const Tensor loss = graph_ ? graph_->step(input, target, after_forward)
                               : stepper_->forward_backward(input, target, steps_now, after_forward);
    if (steps_now) {
      const bool skip = nonfinite.step_bad();
      if (!graph_) skip ? stepper_->skip_step() : stepper_->optimizer_step();  // GraphStep has stepped
      nonfinite.end_step(skip);
      ++st_.global_step;
    }
    timers_->step_done();
    ++step;
    images += batch.size();
    if (nonfinite.batch_bad()) {
      dropped_images += batch.size();  // left out of the epoch's mean loss
    } else {
      NoGradGuard no_grad;
      loss_sum = loss_sum + loss.detach().to(DType::f64) * static_cast<double>(batch.size());
    }
    if (profile_) profile_->step();
    if (o_.on_step)
      o_.on_step({.epoch = epoch,
                  .batch = step,
                  .global_step = st_.global_step,
                  .batch_size = batch.size(),
                  .optimizer_stepped = steps_now,
                  .loss = &loss});
    if (progress_->due()) {
      nonfinite.check_at_progress(epoch, steps);
      progress_->update(step, images,
                        loss_sum.item<double>() / static_cast<double>(std::max<int64_t>(images - dropped_images, 1)));
    }
    // A stop during the last step lets the epoch finish: its checkpoint is then a clean boundary.
    // Under ddp the ranks agree (a signal to any rank stops all after this step).
    if (steps_now && sampler.position() < sampler.size()) {
      stop_sig_ = max_over_ranks(par_, stop_requested() ? stop_signal() : 0);
      if (stop_sig_ != 0) {
        interrupted = true;
        break;
      }
    }
    timers_->begin(Phase::DataWait);
    ++it;
    timers_->end(Phase::DataWait);
  }
  nonfinite.check_at_epoch_end(epoch, steps);  // before any checkpoint or metrics line of this epoch
  const double seconds = part.seconds + seconds_since(t0);
  const PhaseTotals phases = part.phases + timers_->finish_epoch();
  const CpuUse cpu1 = CpuUse::now(train_loader_);
  const double loss_total = loss_sum.item<double>();
  progress_->end_epoch();
  if (interrupted) {
    // Rank 0's checkpoint carries the partial sums of every rank (the others restart from 0).
    parallel::EvalTotals so_far{.loss_sum = loss_total, .correct = 0, .count = images};
    if (par_.distributed()) so_far = parallel::all_reduce_totals(*par_.group, so_far);
    part.loss_sum = so_far.loss_sum;
    part.images = so_far.count;
    part.steps = step;
    part.seconds = seconds;
    part.phases = phases;
    return false;
  }
  // Under ddp: the loss and images of every rank (rank 0 reports the run's).
  parallel::EvalTotals all{.loss_sum = loss_total, .correct = 0, .count = images};
  parallel::EvalTotals dropped{.loss_sum = 0, .correct = 0, .count = dropped_images};  // skip only
  if (par_.distributed()) {
    all = parallel::all_reduce_totals(*par_.group, all);
    if (nonfinite.skipping()) dropped = parallel::all_reduce_totals(*par_.group, dropped);
  }
  m = make_epoch_metrics(epoch, {.loss_sum = all.loss_sum,
                                 .images = all.count,
                                 .dropped_images = dropped.count,
                                 .skipped_steps = nonfinite.skipped_steps(),
                                 .seconds = seconds,
                                 .lr = part.lr,
                                 .phases = phases,
                                 .h2d_copied = h2d_copied,
                                 .cpu_seconds = cpu1.process - cpu0.process,
                                 .loader_cpu_seconds = cpu1.loader - cpu0.loader,
                                 .pool_wait_seconds = cpu1.pool_wait - cpu0.pool_wait});
  if (scaler_->is_enabled()) {
    m.loss_scale = scaler_->scale();
    m.skipped_steps = static_cast<double>(scaler_->skipped_steps() - skipped_before_epoch_);
    skipped_before_epoch_ = scaler_->skipped_steps();
  }
  if (ddp_) {
    const parallel::CommStats comm = ddp_->take_comm_stats();  // this session's part of the epoch
    m.comm_seconds = comm.comm_seconds;
    m.comm_exposed_seconds = comm.exposed_seconds;
  }
  st_.train_seconds += seconds;
  st_.train_images += all.count;
  part = {};
  if (sched_ && sched_per_epoch_) sched_->step();
  if (gpu_) set_gpu_fields(m, gpu_->take());
  const std::string v = m.gpu_util_percent ? gpu_verdict(*m.gpu_util_percent, phases) : phases.verdict();
  if (!v.empty()) log_->line("epoch " + std::to_string(epoch) + ": " + v);
  return true;
}

// Mean cross-entropy and accuracy over the test split (eval mode, no graph, one host read). Under
// ddp each rank evaluates its share with rank 0's buffers, counting padding rows not at all, and
// the totals are summed over the ranks: every test image counts once.
EvalResult Session::evaluate() {
  net_->eval();
  NoGradGuard no_grad;
  if (ddp_) ddp_->sync_buffers();
  layers::Module& net = ddp_ ? *model_ : *net_;  // DDP's forward would sync buffers per batch
  Tensor loss_sum = zeros({}, {.dtype = DType::f64, .device = dev_}),
         correct = zeros({}, {.dtype = DType::i64, .device = dev_});
  int64_t n = 0, seen = 0;
  for (auto& batch : test_loader_) {
    Tensor logits = net.forward(in_layout(batch.input)), target = batch.target;  // (B, classes), (B)
    int64_t rows = batch.size();
    if (test_shard_) {
      rows = parallel::count_real_rows(seen, batch.size(), test_shard_->real_size());
      seen += batch.size();
      if (rows == 0) continue;
      logits = logits.narrow(0, 0, rows);
      target = target.narrow(0, 0, rows);
    }
    loss_sum = loss_sum + stepper_->loss(logits, target).to(DType::f64) * static_cast<double>(rows);
    correct = correct + sum(eq(argmax(logits, 1), target));
    n += rows;
  }
  net_->train();
  parallel::EvalTotals all{.loss_sum = loss_sum.item<double>(), .correct = correct.item<int64_t>(), .count = n};
  if (par_.distributed()) all = parallel::all_reduce_totals(*par_.group, all);
  return {all.mean_loss(), all.accuracy()};
}

// The optimizer's state as a plain optimizer over every parameter holds it, on rank 0 (others:
// empty). A ZeroRedundancyOptimizer holds one share per rank: every rank sends its share.
StateDict Session::optimizer_state() {
  if (auto* zero = dynamic_cast<parallel::ZeroRedundancyOptimizer*>(&opt_)) return zero->consolidate_state_dict(0);
  return par_.is_root() ? opt_.state_dict() : StateDict{};
}

Checkpoint Session::checkpoint(StateDict optimizer) const {
  Checkpoint ck;
  ck.model = model_->state_dict();
  ck.optimizer = std::move(optimizer);
  if (sched_) ck.scheduler = sched_->state_dict();
  ck.sampler = train_loader_.state_dict();
  if (scaler_->is_enabled()) ck.grad_scaler = scaler_->state_dict();
  capture_rng(ck);
  ck.epoch = st_.epochs_done;
  ck.global_step = st_.global_step;
  ck.sampler_position = train_loader_.sampler().position();
  RunState st = st_;
  st.stopper = stopper_.state();
  st.total_seconds = total_seconds();
  ck.metadata = st.to_metadata();
  ck.metadata["model"] = o_.model_name;
  ck.metadata["dataset"] = o_.dataset_name;
  ck.metadata["name"] = o_.name;
  ck.metadata["git_commit"] = build_git_commit();
  return ck;
}

/// "; GPU busy 34%, 812 MB used, 210 W": the NVML fields of an epoch, each only where it was read.
std::string gpu_line(const EpochMetrics& m) {
  std::string s;
  if (m.gpu_util_percent) s += format(", GPU busy %.0f%%", *m.gpu_util_percent);
  if (m.gpu_memory_used_mb) s += format(", %.0f MB used", *m.gpu_memory_used_mb);
  if (m.gpu_power_watts) s += format(", %.0f W", *m.gpu_power_watts);
  if (!s.empty()) s[0] = ';';
  return s;
}

// Evaluation done: early stopping, metrics line, checkpoints, summary, the epoch's line.
void Session::end_epoch(EpochMetrics& m) {
  const int64_t epoch = m.epoch;
  st_.epochs_done = epoch;
  const bool new_best = m.test_acc > st_.best_acc;
  if (new_best) {
    st_.best_acc = m.test_acc;
    st_.best_epoch = epoch;
  }
  const auto& target = o_.early_stop.target_accuracy;
  if (target && !st_.time_to_target && m.test_acc >= *target) st_.time_to_target = st_.train_seconds;
  if (stopper_.enabled() && stopper_.update(epoch, m.test_acc)) {
    st_.early_stop_rule = stopper_.rule();
    st_.early_stop_reason = stopper_.reason();
  }

  if (!st_.early_stop_rule.empty()) {
    stop_reason_ = st_.early_stop_rule == "target" ? "target_accuracy" : "patience";
    stop_detail_ = st_.early_stop_reason;
  }
  // Every rank saw the same test accuracy (all-reduced), so all decide the same early stop.
  StateDict opt_state = checkpoints() ? optimizer_state() : StateDict{};  // every rank: ZeRO gathers here
  on_root([&] {
    if (o_.write_run_dir) {
      metric_lines_.push_back(to_json_line(m));
      write_file_atomic(paths_.metrics, join_lines(metric_lines_));
    }
    if (tb_) {  // flushed each epoch: a killed run's event file reads up to its last epoch
      tb_->add_epoch(m, st_.global_step);
      tb_->flush();
    }
    if (checkpoints()) {
      const Checkpoint ck = checkpoint(std::move(opt_state));
      if (o_.checkpoint.every_epochs > 0 && epoch % o_.checkpoint.every_epochs == 0) {
        save_checkpoint(ck, paths_.epoch_ckpt(epoch));
        prune_epoch_checkpoints(paths_.checkpoints, o_.checkpoint.keep_last, epoch);  // after the new one is safe
      }
      if (new_best && o_.checkpoint.keep_best) save_checkpoint(ck, paths_.best_ckpt);
      save_checkpoint(ck, paths_.last_ckpt);
    }
    write_summary();
  });

  const std::string amp_text =
      (scaler_->is_enabled() ? format("  scale %g, %.0f skipped", m.loss_scale, m.skipped_steps) : std::string()) +
      (m.nonfinite_steps > 0 ? format("  %.0f steps skipped: non-finite loss", m.nonfinite_steps) : std::string());
  log_->line(
      format("epoch %lld/%lld  train_loss %.4f  test_loss %.4f  test_acc %.4f%s  lr %.4g  %.1f s  %.0f img/s  "
             "(eval %.1f s)%s",
             static_cast<long long>(epoch), static_cast<long long>(o_.epochs), m.train_loss, m.test_loss, m.test_acc,
             new_best ? " (best)" : "", m.lr, m.epoch_seconds, m.images_per_second, m.eval_seconds, amp_text.c_str()));
  log_->file_line(
      format("epoch %lld phases: data wait %.3f s,%s forward %.3f s, backward %.3f s, "
             "optimizer %.3f s; all-reduce %.3f s, of it exposed %.3f s; CPU %.3f s (loader workers %.3f s), "
             "thread-pool wait %.3f s",
             static_cast<long long>(epoch), m.data_wait_seconds,
             m.h2d_copied ? format(" h2d %.3f s,", m.h2d_seconds).c_str() : "", m.forward_seconds, m.backward_seconds,
             m.optimizer_seconds, m.comm_seconds, m.comm_exposed_seconds, m.cpu_seconds, m.loader_cpu_seconds,
             m.pool_wait_seconds) +
      gpu_line(m));
}

RunSummary Session::summary() const {
  RunSummary s;
  s.name = o_.name;
  s.device = dev_.str();
  s.world_size = par_.device_count();
  s.global_batch_size = global_batch_size();
  s.lr = base_lr();
  s.restarts = restarts_;
  s.epochs_run = st_.epochs_done;
  s.best_test_acc = std::max(st_.best_acc, 0.0);
  s.best_epoch = st_.best_epoch;
  s.stop_reason = stop_reason_;
  s.stopped_early = stop_reason_ == "target_accuracy" || stop_reason_ == "patience";
  s.stop_detail = stop_detail_;
  s.total_seconds = total_seconds();
  s.images_per_second = st_.train_seconds > 0 ? static_cast<double>(st_.train_images) / st_.train_seconds : 0.0;
  s.time_to_target_seconds = st_.time_to_target;
  s.target_accuracy = o_.early_stop.target_accuracy;
  return s;
}

// SIGTERM/SIGINT: last.ckpt at the current position, summary "signal", exit 128 + signal.
TrainOutcome Session::stop_for_signal(int64_t epoch, int64_t step, int sig) {
  stop_reason_ = "signal";
  stop_detail_ = std::string(signal_name(sig)) + " received: stopped after step " + std::to_string(st_.global_step);
  finish_profile();
  const RunSummary s = summary();
  StateDict opt_state = checkpoints() ? optimizer_state() : StateDict{};
  on_root([&] {
    if (checkpoints()) save_checkpoint(checkpoint(std::move(opt_state)), paths_.last_ckpt);
    if (o_.write_run_dir) write_file_atomic(paths_.summary, to_json(s));
    if (tb_) tb_->flush();
  });
  const std::string at = " at epoch " + std::to_string(epoch) + " step " + std::to_string(step);
  if (o_.write_run_dir) {
    std::string how = "checkpoint.resume=auto";
    if (o_.output.run_dir.empty()) how += " output.run_dir=" + paths_.dir;
    log_->line(std::string("received ") + signal_name(sig) + ": wrote checkpoints/last.ckpt" + at + "; resume with " +
               how);
  } else {
    log_->line(
        std::string("received ") + signal_name(sig) + ": stopped" + at +
        (checkpoints() ? "; wrote " + paths_.last_ckpt : std::string("; no checkpoint directory, none written")));
  }
  return {paths_.dir, s, 128 + sig};
}

// profile.enabled: steps wait + warmup + 1 ... of this session are kept (each batch a step).
void Session::start_profile() {
  if (!o_.profile.enabled) return;
  if (!o_.write_run_dir) {
    say("profile.enabled needs a run directory to write profile/ into: not profiling");
    return;
  }
  const ProfileConfig& c = o_.profile;
  // Every rank records; their clocks are measured against rank 0's now, next to the steps kept.
  if (par_.distributed()) clock_ = profiler::measure_clock_offset(*par_.group);
  profile_ = std::make_unique<profiler::Profile>(
      profiler::ProfileOptions{.schedule = {.wait = c.wait, .warmup = c.warmup, .active = c.active, .repeat = 1},
                               .record_shapes = c.record_shapes,
                               .memory = c.memory});
  say(format("profile: batches %lld to %lld of this session (profile.wait %lld, warmup %lld, active %lld)",
             static_cast<long long>(c.wait + c.warmup + 1), static_cast<long long>(c.wait + c.warmup + c.active),
             static_cast<long long>(c.wait), static_cast<long long>(c.warmup), static_cast<long long>(c.active)));
}

// output.tensorboard: rank 0's event file in the run directory, opened with the hyperparameters
// (config.json as written, "resolved" included; provenance and description left out). A resumed run
// adds a new file beside the earlier session's, whose events after the checkpoint's step the resume
// dropped (prune_after_resume); TensorBoard reads them as one run. The run's end writes the HParams
// session_end_info: success, or failure from run()'s error path; a signal leaves the run resumable.
void Session::start_tensorboard() {
  if (!o_.output.tensorboard) return;
  if (!o_.write_run_dir) {
    say("output.tensorboard needs a run directory to write the event file into: not writing one");
    return;
  }
  on_root([&] {
    tb_ = std::make_unique<TensorBoardWriter>(paths_.dir);
    std::ifstream f(paths_.config);
    const std::string config((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    tb_->add_hparams(flatten_hparams(config, {"provenance", "description"}));
    tb_->flush();
    say("TensorBoard: " + fs::path(tb_->path()).filename().string() + " in the run directory (tensorboard --logdir " +
        fs::path(paths_.dir).parent_path().string() + ")");
  });
}

// Rank 0 writes profile/trace.json (under ddp every rank's spans, gathered, pid = rank, on rank
// 0's clock) and profile/ops.md (the table of every rank's spans and the verdict).
void Session::finish_profile() {
  if (!profile_) return;
  profile_->stop();
  const profiler::Profile& p = *profile_;
  profiler::GatheredTrace trace;  // rank 0's (every rank takes part)
  if (par_.distributed()) trace = profiler::gather_chrome_trace(p, *par_.group, clock_);
  on_root([&] {
    const fs::path dir = fs::path(paths_.dir) / "profile";
    std::error_code ec;
    fs::create_directories(dir, ec);
    EMBER_CHECK(!ec, "cannot create '", dir.string(), "': ", ec.message());
    write_file_atomic((dir / "trace.json").string(), par_.distributed() ? trace.json : p.chrome_trace_json(par_.rank));
    // ops.md: the table of every rank's spans and the verdict under it (profiler/verdict.h).
    std::vector<profiler::RankProfile> ranks;
    if (par_.distributed()) ranks = profiler::parse_chrome_trace(trace.json, (dir / "trace.json").string());
    else ranks.push_back(profiler::rank_profile(p, par_.rank, par_.device.is_cuda()));
    for (profiler::RankProfile& r : ranks) r.cuda = par_.device.is_cuda();  // also with profile.memory false
    write_file_atomic((dir / "ops.md").string(),
                      "# Profile of " + o_.name + "\n\n" + profiler::ops_markdown(ranks, 40));
  });
  if (par_.distributed()) {
    int64_t worst = 0;
    for (const profiler::ClockOffset& c : trace.offsets) worst = std::max(worst, c.residual_ns);
    const double within_us = static_cast<double>(worst) / 1e3;
    say(
        format("profile: %lld spans of %d ranks in profile/trace.json (clocks aligned to rank 0's within %.0f us; open "
               "it in ui.perfetto.dev), their table and verdict in profile/ops.md",
               static_cast<long long>(trace.spans), par_.world_size, within_us));
  } else {
    say("profile: " + std::to_string(p.spans().size()) + " spans in profile/trace.json (open it in ui.perfetto.dev), " +
        "the table and verdict in profile/ops.md");
  }
  profile_.reset();
}

void Session::log_final(const RunSummary& s) {
  std::string end = s.stop_reason == "completed"
                        ? "completed " + count(s.epochs_run, "epoch")
                        : "stopped early after epoch " + std::to_string(s.epochs_run) + ": " + s.stop_detail;
  say(end);
  std::string target = "no target accuracy set";
  if (s.target_accuracy) {
    target = s.time_to_target_seconds ? format("time to target %g: %s of training", *s.target_accuracy,
                                               format_duration(*s.time_to_target_seconds).c_str())
                                      : format("target %g not reached", *s.target_accuracy);
  }
  log_->line(o_.program +
             format(": total time %s (training %.1f s), %.0f img/s on %s; best test_acc %.4f (epoch %lld); "
                    "%s",
                    format_duration(s.total_seconds).c_str(), st_.train_seconds, s.images_per_second, s.device.c_str(),
                    s.best_test_acc, static_cast<long long>(s.best_epoch), target.c_str()));
}

TrainOutcome Session::run() {
  if (par_.distributed())  // rank 0's
    paths_ = RunPaths(parallel::broadcast_string(*par_.group, paths_.dir), o_.checkpoint_dir);
  open_run_dir();
  try {
    return train();
  } catch (const std::exception& e) {
    log_->file_line("error: " + error_text(e));  // log.txt tells how the run ended, as the console did
    if (tb_) {  // rank 0's file: the HPARAMS table shows the run as failed (no collective: ranks may be gone)
      try {
        tb_->add_session_end(SessionStatus::failure);
        tb_->flush();
      } catch (const std::exception&) {  // the run's own error is the one to report
      }
    }
    throw;
  }
}

TrainOutcome Session::train() {
  build();
  resume();
  session_start_ = Clock::now();
  start_profile();
  start_tensorboard();

  if (!st_.early_stop_rule.empty()) {
    stop_reason_ = st_.early_stop_rule == "target" ? "target_accuracy" : "patience";
    stop_detail_ = st_.early_stop_reason;
    say("this run already stopped early (" + stop_detail_ + "); nothing to train");
  }
  if (st_.early_stop_rule.empty() && st_.epochs_done >= o_.epochs) {
    say(std::to_string(st_.epochs_done) + " epochs are done and epochs = " + std::to_string(o_.epochs) +
        ": nothing to train");
  }
  for (int64_t epoch = st_.epochs_done + 1; epoch <= o_.epochs && st_.early_stop_rule.empty(); ++epoch) {
    if (const int sig = max_over_ranks(par_, stop_requested() ? stop_signal() : 0))
      return stop_for_signal(epoch, st_.partial.steps, sig);
    EpochMetrics m;
    if (!train_epoch(epoch, m)) return stop_for_signal(epoch, st_.partial.steps, stop_sig_);
    const auto t_eval = Clock::now();
    const EvalResult r = evaluate();
    m.eval_seconds = seconds_since(t_eval);
    m.test_loss = r.loss;
    m.test_acc = r.accuracy;
    end_epoch(m);
    if (o_.on_epoch) o_.on_epoch(m);
  }
  finish_profile();
  const RunSummary s = summary();
  on_root([&] {
    if (o_.write_run_dir) write_file_atomic(paths_.summary, to_json(s));
    if (tb_) {
      tb_->add_session_end(SessionStatus::success);
      tb_->flush();
    }
  });
  log_final(s);
  return {paths_.dir, s, 0};
}

}  // namespace

Trainer::~Trainer() = default;

TrainOutcome Trainer::run() {
  EMBER_CHECK(!ran_, "Trainer::run: a Trainer runs once (its parts have trained); make another for another run");
  ran_ = true;
  // The config path installed its guard before reading data; a user's Trainer catches signals
  // while it trains. Released when run() returns, as ember-train always did.
  std::unique_ptr<StopSignalGuard> guard = guard_ ? std::move(guard_) : std::make_unique<StopSignalGuard>();
  // On cuda:N, N stays the current device for the whole run: every launcher sets its own guard,
  // but a CUDA call that relies on the current device (a context-bound library call, a launch
  // that misses its guard) would otherwise run on cuda:0 with cuda:N pointers.
  DeviceGuard device_guard(parts_.parallel.device);
  Session session(parts_, options_);
  return session.run();
}

}  // namespace ember::train
