// The experiment-config schema table and the schema-only helpers (expected-value texts, the
// nearest-key suggestion). docs/config.md is written by hand from this table: keep them in sync
// (tests/train/test_config.cpp checks every path and default appears there).
#include <ember/train/config_schema.h>

#include <algorithm>
#include <cstdio>
#include <iterator>

namespace ember::train {
namespace {

// A FieldRef for member expression `m` of ExperimentConfig, typed T.
#define EMBER_CONFIG_FIELD(T, m) static_cast<T& (*)(ExperimentConfig&)>([](ExperimentConfig& c) -> T& { return c.m; })

// An EnumField for member expression `m` of ExperimentConfig, an enum with ConfigNames.
#define EMBER_CONFIG_ENUM(m)                                                       \
  EnumField {                                                                      \
    [](const ExperimentConfig& c) { return static_cast<size_t>(c.m); },            \
        [](ExperimentConfig& c, size_t i) { c.m = static_cast<decltype(c.m)>(i); } \
  }

// The choices of an enum key: its ConfigNames, in the enum's order (EnumField's indices).
template <typename E> std::vector<std::string> choices_of() {
  return std::vector<std::string>(std::begin(ConfigNames<E>::values), std::end(ConfigNames<E>::values));
}

using DoublePair = std::pair<double, double>;  // the macro argument cannot hold a comma

constexpr Bound ge(double v) { return {v, false}; }
constexpr Bound gt(double v) { return {v, true}; }
constexpr Bound le(double v) { return {v, false}; }
constexpr Bound lt(double v) { return {v, true}; }

bool valid_name(const ExperimentConfig& c) {
  // The name becomes a directory name: keep it to characters no shell or file system minds.
  if (c.name.empty()) return false;
  return std::all_of(c.name.begin(), c.name.end(), [](char ch) {
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '-' || ch == '_' ||
           ch == '.';
  });
}

bool valid_device(const ExperimentConfig& c) {
  const std::string& d = c.device;
  if (d == "auto" || d == "cpu" || d == "cuda") return true;
  if (d.rfind("cuda:", 0) != 0 || d.size() == 5 || d.size() > 5 + 4) return false;  // at most 4 digits
  return std::all_of(d.begin() + 5, d.end(), [](char ch) { return ch >= '0' && ch <= '9'; });
}

bool valid_depth(const ExperimentConfig& c) { return c.model.depth >= 10 && (c.model.depth - 4) % 6 == 0; }

bool valid_milestones(const ExperimentConfig& c) {
  const auto& m = c.schedule.milestones;
  return std::adjacent_find(m.begin(), m.end(), [](int64_t a, int64_t b) { return a >= b; }) == m.end();
}

bool non_empty_dir(const ExperimentConfig& c) { return !c.output.dir.empty(); }

bool valid_devices(const ExperimentConfig& c) {
  return std::all_of(c.parallel.devices.begin(), c.parallel.devices.end(), [&](const std::string& d) {
    ExperimentConfig one;
    one.device = d;
    return d != "auto" && valid_device(one);
  });
}

std::vector<KeySpec> build_schema() {
  using K = KeyKind;
  return {
      {.path = "description",
       .kind = K::String,
       .default_json = "\"\"",
       .doc = "What the experiment shows (free text; configs/ files carry one).",
       .field = EMBER_CONFIG_FIELD(std::string, description)},
      {.path = "name",
       .kind = K::String,
       .default_json = "\"run\"",
       .doc = "Run name; the run directory is <output.dir>/<name>-<YYYYmmdd-HHMMSS>.",
       .field = EMBER_CONFIG_FIELD(std::string, name),
       .valid = valid_name,
       .rule = "a non-empty name of letters, digits, '-', '_' and '.'"},
      {.path = "seed",
       .kind = K::UInt64,
       .default_json = "1",
       .doc = "The run's random seed (initialisation, shuffling, augmentation, dropout, synthetic data).",
       .field = EMBER_CONFIG_FIELD(uint64_t, seed)},
      {.path = "device",
       .kind = K::String,
       .default_json = "\"auto\"",
       .doc = "Where to train; auto: a GPU when one is usable, else the CPU.",
       .field = EMBER_CONFIG_FIELD(std::string, device),
       .valid = valid_device,
       .rule = "auto, cpu, cuda or cuda:N"},
      {.path = "epochs",
       .kind = K::Int,
       .lo = ge(1),
       .default_json = "10",
       .doc = "Number of training epochs.",
       .field = EMBER_CONFIG_FIELD(int64_t, epochs)},
      {.path = "precision",
       .kind = K::Enum,
       .choices = choices_of<Precision>(),
       .default_json = "\"fp32\"",
       .doc = "fp32, or mixed precision: bf16 / fp16 autocast (fp16 with a gradient scaler); parameters stay f32.",
       .field = EMBER_CONFIG_ENUM(precision)},
      {.path = "memory_format",
       .kind = K::Enum,
       .choices = choices_of<MemoryFormat>(),
       .default_json = "\"contiguous\"",
       .doc = "Layout of the model's 4-D weights and the input batches: contiguous (NCHW) or channels_last (NHWC in "
              "memory, what tensor-core convolutions prefer).",
       .field = EMBER_CONFIG_ENUM(memory_format)},

      {.path = "model.name",
       .kind = K::Enum,
       .choices = choices_of<ModelKind>(),
       .default_json = "\"mnist_cnn\"",
       .doc = "The model; mnist_cnn needs data.dataset mnist, the others CIFAR-shaped data.",
       .field = EMBER_CONFIG_ENUM(model.name)},
      {.path = "model.depth",
       .kind = K::Int,
       .default_json = "28",
       .doc = "wide_resnet: depth (6k+4).",
       .field = EMBER_CONFIG_FIELD(int64_t, model.depth),
       .valid = valid_depth,
       .rule = "an integer >= 10 of the form 6k+4 (10, 16, 22, 28, ...)"},
      {.path = "model.widen",
       .kind = K::Int,
       .lo = ge(1),
       .default_json = "10",
       .doc = "wide_resnet: widen factor.",
       .field = EMBER_CONFIG_FIELD(int64_t, model.widen)},
      {.path = "model.dropout",
       .kind = K::Float,
       .lo = ge(0),
       .hi = lt(1),
       .default_json = "0.0",
       .doc = "Dropout probability: wide_resnet in-block, cifar_cnn before the classifier; others ignore it.",
       .field = EMBER_CONFIG_FIELD(double, model.dropout)},

      {.path = "data.dataset",
       .kind = K::Enum,
       .choices = choices_of<DatasetKind>(),
       .default_json = "\"mnist\"",
       .doc = "mnist reads any MNIST-format IDX set (e.g. Fashion-MNIST); synthetic is random CIFAR-10-shaped data.",
       .field = EMBER_CONFIG_ENUM(data.dataset)},
      {.path = "data.path",
       .kind = K::String,
       .default_json = "\"\"",
       .doc = "Directory of the files; empty: the dataset's default (see below).",
       .field = EMBER_CONFIG_FIELD(std::string, data.path)},
      {.path = "data.batch_size",
       .kind = K::Int,
       .lo = ge(1),
       .default_json = "64",
       .doc = "Training batch size of each process (under ddp, per rank).",
       .field = EMBER_CONFIG_FIELD(int64_t, data.batch_size)},
      {.path = "data.global_batch_size",
       .kind = K::Int,
       .lo = ge(0),
       .default_json = "0",
       .doc = "Images per optimizer step over all ranks; > 0 replaces batch_size with this / (ranks x "
              "train.accumulation_steps), which must divide it. 0: batch_size rules.",
       .field = EMBER_CONFIG_FIELD(int64_t, data.global_batch_size)},
      {.path = "data.test_batch_size",
       .kind = K::Int,
       .lo = ge(1),
       .default_json = "1000",
       .doc = "Evaluation batch size.",
       .field = EMBER_CONFIG_FIELD(int64_t, data.test_batch_size)},
      {.path = "data.workers",
       .kind = K::Int,
       .lo = ge(0),
       .default_json = "1",
       .doc = "Worker threads collating batches (host mode).",
       .field = EMBER_CONFIG_FIELD(int64_t, data.workers)},
      {.path = "data.augment",
       .kind = K::Bool,
       .default_json = "false",
       .doc = "CIFAR: random crop 32 (padding 4) + horizontal flip; MNIST: none.",
       .field = EMBER_CONFIG_FIELD(bool, data.augment)},
      {.path = "data.resident",
       .kind = K::Bool,
       .default_json = "false",
       .doc = "Keep the whole dataset on the device and batch there.",
       .field = EMBER_CONFIG_FIELD(bool, data.resident)},
      {.path = "data.limit_train",
       .kind = K::Int,
       .lo = ge(0),
       .default_json = "0",
       .doc = "Use only the first N training examples (0: all).",
       .field = EMBER_CONFIG_FIELD(int64_t, data.limit_train)},
      {.path = "data.limit_test",
       .kind = K::Int,
       .lo = ge(0),
       .default_json = "0",
       .doc = "Use only the first N test examples (0: all).",
       .field = EMBER_CONFIG_FIELD(int64_t, data.limit_test)},

      {.path = "optim.name",
       .kind = K::Enum,
       .choices = choices_of<OptimizerKind>(),
       .default_json = "\"sgd\"",
       .doc = "The optimizer.",
       .field = EMBER_CONFIG_ENUM(optim.name)},
      {.path = "optim.lr",
       .kind = K::Float,
       .lo = gt(0),
       .default_json = "0.1",
       .doc = "Learning rate.",
       .field = EMBER_CONFIG_FIELD(double, optim.lr)},
      {.path = "optim.momentum",
       .kind = K::Float,
       .lo = ge(0),
       .hi = lt(1),
       .default_json = "0.0",
       .doc = "sgd: momentum.",
       .field = EMBER_CONFIG_FIELD(double, optim.momentum)},
      {.path = "optim.nesterov",
       .kind = K::Bool,
       .default_json = "false",
       .doc = "sgd: Nesterov momentum (needs optim.momentum > 0).",
       .field = EMBER_CONFIG_FIELD(bool, optim.nesterov)},
      {.path = "optim.weight_decay",
       .kind = K::Float,
       .lo = ge(0),
       .default_json = "0.0",
       .doc = "L2 penalty (sgd, adam) or decoupled decay (adamw).",
       .field = EMBER_CONFIG_FIELD(double, optim.weight_decay)},
      {.path = "optim.betas",
       .kind = K::FloatPair,
       .lo = ge(0),
       .hi = lt(1),
       .default_json = "[0.9, 0.999]",
       .doc = "adam/adamw: [beta1, beta2].",
       .field = EMBER_CONFIG_FIELD(DoublePair, optim.betas)},
      {.path = "optim.eps",
       .kind = K::Float,
       .lo = gt(0),
       .default_json = "1e-08",
       .doc = "adam/adamw: term added to the denominator.",
       .field = EMBER_CONFIG_FIELD(double, optim.eps)},
      {.path = "optim.clip_grad_norm",
       .kind = K::Float,
       .lo = ge(0),
       .default_json = "0.0",
       .doc = "Clip the gradients' global L2 norm to this before each step (0: off); fp16 unscales first.",
       .field = EMBER_CONFIG_FIELD(double, optim.clip_grad_norm)},
      {.path = "optim.lr_scaling",
       .kind = K::Enum,
       .choices = choices_of<LrScaling>(),
       .default_json = "\"none\"",
       .doc = "linear: train at lr x B / reference_batch_size, B the global batch; sqrt: lr x sqrt(B / "
              "reference_batch_size); none: lr.",
       .field = EMBER_CONFIG_ENUM(optim.lr_scaling)},
      {.path = "optim.reference_batch_size",
       .kind = K::Int,
       .lo = ge(1),
       .default_json = "256",
       .doc = "The global batch that optim.lr is meant for (with lr_scaling).",
       .field = EMBER_CONFIG_FIELD(int64_t, optim.reference_batch_size)},

      {.path = "schedule.name",
       .kind = K::Enum,
       .choices = choices_of<ScheduleKind>(),
       .default_json = "\"none\"",
       .doc = "The learning-rate schedule (stepped per optimizer step, lengths in epochs).",
       .field = EMBER_CONFIG_ENUM(schedule.name)},
      {.path = "schedule.step_size",
       .kind = K::Int,
       .lo = ge(1),
       .default_json = "30",
       .doc = "step: epochs between decays.",
       .field = EMBER_CONFIG_FIELD(int64_t, schedule.step_size)},
      {.path = "schedule.gamma",
       .kind = K::Float,
       .lo = gt(0),
       .hi = le(1),
       .default_json = "0.1",
       .doc = "step, multistep: decay factor.",
       .field = EMBER_CONFIG_FIELD(double, schedule.gamma)},
      {.path = "schedule.milestones",
       .kind = K::IntList,
       .lo = ge(1),
       .default_json = "[]",
       .doc = "multistep: epochs at which the lr is multiplied by gamma.",
       .field = EMBER_CONFIG_FIELD(std::vector<int64_t>, schedule.milestones),
       .valid = valid_milestones,
       .rule = "a strictly ascending list of integers, each >= 1"},
      {.path = "schedule.t_max",
       .kind = K::Int,
       .lo = ge(0),
       .default_json = "0",
       .doc = "cosine: period in epochs (0: the run's epochs).",
       .field = EMBER_CONFIG_FIELD(int64_t, schedule.t_max)},
      {.path = "schedule.eta_min",
       .kind = K::Float,
       .lo = ge(0),
       .default_json = "0.0",
       .doc = "cosine: final lr.",
       .field = EMBER_CONFIG_FIELD(double, schedule.eta_min)},
      {.path = "schedule.max_lr",
       .kind = K::Float,
       .lo = ge(0),
       .default_json = "0.0",
       .doc = "onecycle: peak lr (0: optim.lr).",
       .field = EMBER_CONFIG_FIELD(double, schedule.max_lr)},
      {.path = "schedule.pct_start",
       .kind = K::Float,
       .lo = gt(0),
       .hi = lt(1),
       .default_json = "0.3",
       .doc = "onecycle: fraction of the steps spent rising.",
       .field = EMBER_CONFIG_FIELD(double, schedule.pct_start)},
      {.path = "schedule.warmup_epochs",
       .kind = K::Int,
       .lo = ge(0),
       .default_json = "0",
       .doc = "Linear warm-up from 0.1 x lr in front of the schedule (0: none; not with onecycle).",
       .field = EMBER_CONFIG_FIELD(int64_t, schedule.warmup_epochs)},

      {.path = "early_stop.target_accuracy",
       .kind = K::OptionalFloat,
       .lo = gt(0),
       .hi = le(1),
       .default_json = "null",
       .doc = "Stop once test_acc >= this for `patience` epochs (null: no target).",
       .field = EMBER_CONFIG_FIELD(std::optional<double>, early_stop.target_accuracy)},
      {.path = "early_stop.patience",
       .kind = K::Int,
       .lo = ge(0),
       .default_json = "0",
       .doc = "Epochs (see below; 0 without a target: no early stopping).",
       .field = EMBER_CONFIG_FIELD(int64_t, early_stop.patience)},
      {.path = "early_stop.min_delta",
       .kind = K::Float,
       .lo = ge(0),
       .default_json = "0.0",
       .doc = "Without a target: the improvement over the best that counts.",
       .field = EMBER_CONFIG_FIELD(double, early_stop.min_delta)},

      {.path = "checkpoint.every_epochs",
       .kind = K::Int,
       .lo = ge(0),
       .default_json = "1",
       .doc = "Write checkpoints/epoch_N.ckpt every this many epochs (0: never).",
       .field = EMBER_CONFIG_FIELD(int64_t, checkpoint.every_epochs)},
      {.path = "checkpoint.keep_last",
       .kind = K::Int,
       .lo = ge(0),
       .default_json = "2",
       .doc = "Keep the newest this many epoch_N.ckpt (0: all).",
       .field = EMBER_CONFIG_FIELD(int64_t, checkpoint.keep_last)},
      {.path = "checkpoint.keep_best",
       .kind = K::Bool,
       .default_json = "true",
       .doc = "Write checkpoints/best.ckpt at every new best test_acc.",
       .field = EMBER_CONFIG_FIELD(bool, checkpoint.keep_best)},
      {.path = "checkpoint.resume",
       .kind = K::String,
       .default_json = "\"\"",
       .doc = "\"\" (fresh), \"auto\" (the run directory's last.ckpt when it exists) or a checkpoint path.",
       .field = EMBER_CONFIG_FIELD(std::string, checkpoint.resume)},

      {.path = "output.dir",
       .kind = K::String,
       .default_json = "\"runs\"",
       .doc = "Parent of run directories.",
       .field = EMBER_CONFIG_FIELD(std::string, output.dir),
       .valid = non_empty_dir,
       .rule = "a non-empty directory path"},
      {.path = "output.run_dir",
       .kind = K::String,
       .default_json = "\"\"",
       .doc = "An explicit run directory (overrides output.dir; needed for resume auto).",
       .field = EMBER_CONFIG_FIELD(std::string, output.run_dir)},
      {.path = "output.log_interval",
       .kind = K::Float,
       .lo = gt(0),
       .default_json = "10.0",
       .doc = "Seconds between progress lines in log.txt.",
       .field = EMBER_CONFIG_FIELD(double, output.log_interval)},
      {.path = "output.tensorboard",
       .kind = K::Bool,
       .default_json = "false",
       .doc = "Also write a TensorBoard event file (every metrics.jsonl number per epoch at the global step, the "
              "config as HParams) into the run directory, from rank 0.",
       .field = EMBER_CONFIG_FIELD(bool, output.tensorboard)},

      {.path = "train.accumulation_steps",
       .kind = K::Int,
       .lo = ge(1),
       .default_json = "1",
       .doc = "Batches per optimizer step (gradients summed, each loss scaled by 1/N; ddp reduces once per step).",
       .field = EMBER_CONFIG_FIELD(int64_t, train.accumulation_steps)},
      {.path = "train.on_nonfinite",
       .kind = K::Enum,
       .choices = choices_of<NonFinitePolicy>(),
       .default_json = "\"stop\"",
       .doc = "A training loss that is NaN or inf: stop (an error naming the epoch and batch, before that "
              "epoch's checkpoint; no extra host synchronisation) or skip (that optimizer step is not taken "
              "on any rank; reads each loss, one host synchronisation per batch).",
       .field = EMBER_CONFIG_ENUM(train.on_nonfinite)},
      {.path = "train.deterministic",
       .kind = K::Bool,
       .default_json = "false",
       .doc = "Use deterministic algorithms only (ember::set_deterministic for the run): cuDNN engines not noted "
              "nondeterministic, index_add and max-pool backward without atomics on CUDA; an op with no "
              "deterministic path is an error naming it. The CPU is deterministic either way "
              "(docs/determinism.md).",
       .field = EMBER_CONFIG_FIELD(bool, train.deterministic)},
      {.path = "train.cuda_graphs",
       .kind = K::Bool,
       .default_json = "false",
       .doc = "Capture one whole training step (forward, loss, backward, optimizer step) as a CUDA graph after "
              "3 eager warm-up steps and replay it for every later batch of the same shape; a batch of another "
              "shape (the last, partial one) runs eagerly, and a new learning rate re-captures. Needs a CUDA "
              "device, parallel.mode none, precision fp32 or bf16, train.accumulation_steps 1, train.on_nonfinite "
              "stop and profile.enabled false (docs/cuda_graphs.md).",
       .field = EMBER_CONFIG_FIELD(bool, train.cuda_graphs)},

      {.path = "parallel.mode",
       .kind = K::Enum,
       .choices = choices_of<ParallelMode>(),
       .default_json = "\"none\"",
       .doc = "dp: DataParallel over parallel.devices in one process; ddp: one process per device (run under "
              "ember-run, torchrun or srun); data.batch_size is per process.",
       .field = EMBER_CONFIG_ENUM(parallel.mode)},
      {.path = "parallel.devices",
       .kind = K::StringList,
       .default_json = "[]",
       .doc = "dp: the devices, repeats allowed ([\"cpu\", \"cpu\"]); empty: every visible GPU.",
       .field = EMBER_CONFIG_FIELD(std::vector<std::string>, parallel.devices),
       .valid = valid_devices,
       .rule = "a list of devices, each cpu, cuda or cuda:N"},
      {.path = "parallel.backend",
       .kind = K::Enum,
       .choices = {"auto", "nccl", "tcp"},
       .default_json = "\"auto\"",
       .doc = "ddp: auto (nccl for CUDA tensors when usable, else tcp), nccl or tcp.",
       .field = EMBER_CONFIG_FIELD(std::string, parallel.backend)},
      {.path = "parallel.algorithm",
       .kind = K::Enum,
       .choices = {"native", "ring"},
       .default_json = "\"native\"",
       .doc = "ddp over nccl: native (ncclAllReduce) or ring (ember's ring over ncclSend/ncclRecv).",
       .field = EMBER_CONFIG_FIELD(std::string, parallel.algorithm)},
      {.path = "parallel.bucket_cap_mb",
       .kind = K::Float,
       .lo = gt(0),
       .default_json = "25.0",
       .doc = "ddp: gradient bucket size in MiB (smaller: more overlap with backward, more all-reduces).",
       .field = EMBER_CONFIG_FIELD(double, parallel.bucket_cap_mb)},
      {.path = "parallel.timeout_s",
       .kind = K::OptionalFloat,
       .lo = gt(0),
       .default_json = "null",
       .doc = "ddp: seconds a collective may take before it is an error naming the rank that is missing; null: "
              "EMBER_COLLECTIVE_TIMEOUT when set, else 300.",
       .field = EMBER_CONFIG_FIELD(std::optional<double>, parallel.timeout_s)},
      {.path = "parallel.sync_batchnorm",
       .kind = K::Bool,
       .default_json = "false",
       .doc = "ddp: every BatchNorm2d normalizes with the mean and variance of the global batch of all ranks "
              "(SyncBatchNorm: one all-gather per layer forward, one all-reduce backward); other modes: no effect.",
       .field = EMBER_CONFIG_FIELD(bool, parallel.sync_batchnorm)},
      {.path = "parallel.zero",
       .kind = K::Int,
       .lo = ge(0),
       .hi = le(1),
       .default_json = "0",
       .doc = "ddp: 1 splits the optimizer state over the ranks (ZeRO stage 1: each rank steps its share of the "
              "parameters and broadcasts them; checkpoints hold the whole state); 0 keeps a copy on every rank.",
       .field = EMBER_CONFIG_FIELD(int64_t, parallel.zero)},
      {.path = "parallel.comm_hook",
       .kind = K::Enum,
       .choices = {"none", "fp16", "bf16"},
       .default_json = "\"none\"",
       .doc = "ddp: fp16 or bf16 casts each gradient bucket to that dtype for the all-reduce (half the bytes of f32 "
              "on the wire; each gradient rounded to 11 or 8 significant bits, divided by the world size before the "
              "sum); none all-reduces the buckets as they are.",
       .field = EMBER_CONFIG_FIELD(std::string, parallel.comm_hook)},
      {.path = "profile.enabled",
       .kind = K::Bool,
       .default_json = "false",
       .doc = "Profile the run (profiler::Profile): profile/trace.json (Chrome trace: Perfetto, chrome://tracing) and "
              "profile/ops.md (calls, total and self time per op and span) in the run directory.",
       .field = EMBER_CONFIG_FIELD(bool, profile.enabled)},
      {.path = "profile.wait",
       .kind = K::Int,
       .lo = ge(0),
       .default_json = "1",
       .doc = "Training steps (batches) not recorded at the start.",
       .field = EMBER_CONFIG_FIELD(int64_t, profile.wait)},
      {.path = "profile.warmup",
       .kind = K::Int,
       .lo = ge(0),
       .default_json = "1",
       .doc = "Steps then recorded and dropped (first-call costs).",
       .field = EMBER_CONFIG_FIELD(int64_t, profile.warmup)},
      {.path = "profile.active",
       .kind = K::Int,
       .lo = ge(1),
       .default_json = "3",
       .doc = "Steps then kept in the profile.",
       .field = EMBER_CONFIG_FIELD(int64_t, profile.active)},
      {.path = "profile.record_shapes",
       .kind = K::Bool,
       .default_json = "false",
       .doc = "Each op's span carries its inputs' shapes and dtypes (\"[32, 1, 28, 28] f32, [16, 1, 3, 3] f32\"; the "
              "trace's \"Input Dims\"); off, the ops format nothing.",
       .field = EMBER_CONFIG_FIELD(bool, profile.record_shapes)},
      {.path = "profile.memory",
       .kind = K::Bool,
       .default_json = "true",
       .doc = "The allocators' bytes in use after each allocation and free, as counters in the trace (a memory track "
              "in Perfetto).",
       .field = EMBER_CONFIG_FIELD(bool, profile.memory)},
  };
}

std::string format_bound(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

// " >= 1", " in [0, 1)", "" (no range).
std::string range_text(const KeySpec& s) {
  if (s.lo && s.hi) {
    return std::string(" in ") + (s.lo->open ? "(" : "[") + format_bound(s.lo->value) + ", " +
           format_bound(s.hi->value) + (s.hi->open ? ")" : "]");
  }
  if (s.lo) return std::string(s.lo->open ? " > " : " >= ") + format_bound(s.lo->value);
  if (s.hi) return std::string(s.hi->open ? " < " : " <= ") + format_bound(s.hi->value);
  return "";
}

std::string join(const std::vector<std::string>& items, const std::string& sep) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) out += (i ? sep : "") + items[i];
  return out;
}

std::string parent_of(const std::string& path) {
  size_t dot = path.rfind('.');
  return dot == std::string::npos ? "" : path.substr(0, dot);
}
std::string leaf_of(const std::string& path) {
  size_t dot = path.rfind('.');
  return dot == std::string::npos ? path : path.substr(dot + 1);
}

bool is_object_path(const std::string& path) {
  const auto& objs = config_object_paths();
  return std::find(objs.begin(), objs.end(), path) != objs.end();
}

// The direct children of object `parent` ("" = top level), in schema order.
std::vector<std::string> children_of(const std::string& parent) {
  std::vector<std::string> out;
  for (const auto& s : config_schema())
    if (parent_of(s.path) == parent) out.push_back(leaf_of(s.path));
  if (parent.empty())
    for (const auto& o : config_object_paths()) out.push_back(o);
  return out;
}

// Close enough to suggest: a few edits, relative to the length, and never a complete rewrite of
// the unknown name (a one-letter key is not "close" to every two-letter one).
bool close_enough(size_t d, size_t unknown_len) { return d <= std::max<size_t>(2, unknown_len / 3) && d < unknown_len; }

}  // namespace

const std::vector<KeySpec>& config_schema() {
  static const std::vector<KeySpec> schema = build_schema();
  return schema;
}

const KeySpec* find_key_spec(std::string_view path) {
  for (const auto& s : config_schema())
    if (s.path == path) return &s;
  return nullptr;
}

const std::vector<std::string>& config_object_paths() {
  static const std::vector<std::string> objects = [] {
    std::vector<std::string> out;
    for (const auto& s : config_schema()) {
      std::string p = parent_of(s.path);
      if (!p.empty() && std::find(out.begin(), out.end(), p) == out.end()) out.push_back(p);
    }
    return out;
  }();
  return objects;
}

std::string expected_text(const KeySpec& s) {
  if (!s.rule.empty()) return s.rule;
  switch (s.kind) {
    case KeyKind::Int:
      return "an integer" + range_text(s);
    case KeyKind::UInt64:
      return "a non-negative integer (at most 2^64-1)";
    case KeyKind::Float:
      return "a number" + range_text(s);
    case KeyKind::Bool:
      return "true or false";
    case KeyKind::String:
      return "a string";
    case KeyKind::Enum:
      return "one of " + join(s.choices, ", ");
    case KeyKind::IntList:
      return range_text(s).empty() ? "a list of integers" : "a list of integers, each" + range_text(s);
    case KeyKind::FloatPair:
      return "a list of two numbers, each" + range_text(s);
    case KeyKind::OptionalFloat:
      return "null or a number" + range_text(s);
    case KeyKind::StringList:
      return "a list of strings";
  }
  return "";
}

size_t levenshtein(std::string_view a, std::string_view b) {
  // One row of the classic dynamic program: row[j] = distance(a[0, i), b[0, j)).
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

std::string unknown_key_hint(const std::string& path) {
  // "optim.lr.x": the walk went through a plain value.
  for (size_t dot = path.find('.'); dot != std::string::npos; dot = path.find('.', dot + 1)) {
    if (find_key_spec(path.substr(0, dot)))
      return "; " + path.substr(0, dot) + " is a single value (" + expected_text(*find_key_spec(path.substr(0, dot))) +
             "), not an object";
  }
  const std::string parent = parent_of(path), leaf = leaf_of(path);
  std::string best;
  size_t best_d = SIZE_MAX;
  auto consider = [&](const std::string& candidate, size_t d) {
    if (d < best_d) best = candidate, best_d = d;
  };
  // Over full paths: catches typos in the object part too ("optm.lr").
  for (const auto& s : config_schema())
    if (size_t d = levenshtein(path, s.path); close_enough(d, path.size()) && d < leaf.size()) consider(s.path, d);
  for (const auto& o : config_object_paths())
    if (size_t d = levenshtein(path, o); close_enough(d, path.size()) && d < leaf.size()) consider(o, d);
  // Over the leaf within the same object, also accepting a clear prefix ("batch" -> "batch_size").
  if (parent.empty() || is_object_path(parent)) {
    for (const auto& child : children_of(parent)) {
      size_t d = levenshtein(leaf, child);
      const size_t shorter = std::min(leaf.size(), child.size());
      const bool prefix = shorter >= 3 && (child.rfind(leaf, 0) == 0 || leaf.rfind(child, 0) == 0);
      // A clear prefix beats a few edits: "batch" means batch_size, not path (2 edits away).
      if (close_enough(d, leaf.size()) || prefix)
        consider(parent.empty() ? child : parent + "." + child, prefix ? 0 : d);
    }
  }
  // The same leaf in another object ("lr" at the top level -> "optim.lr").
  if (best.empty()) {
    for (const auto& s : config_schema())
      if (leaf_of(s.path) == leaf) {
        best = s.path;
        break;
      }
  }
  if (!best.empty()) return "; did you mean " + best + "?";
  // No close key: list the keys of the nearest enclosing object that exists.
  std::string scope = parent;
  while (!scope.empty() && !is_object_path(scope)) scope = parent_of(scope);
  const std::string keys = join(children_of(scope), ", ");
  return scope.empty() ? "; valid top-level keys: " + keys : "; valid keys of " + scope + ": " + keys;
}

}  // namespace ember::train
