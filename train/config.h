#pragma once
// Experiment configs: the JSON file users write for ember-train, its schema, command-line
// overrides and validation.
//
//   {"name": "mnist", "epochs": 10, "optim": {"name": "adam", "lr": 0.001}, ...}
//
// Every key is optional; a missing key takes the default below. Validation happens before any
// work starts, and every error is an ember::Error naming the config source, the full key path,
// what was expected and what was found:
//   "runs.json: optim.lrr: unknown key; did you mean optim.lr?"
//   "runs.json: data.batch_size: expected an integer >= 1, found -3"
//   "override 'epochs=ten': epochs: expected an integer >= 1, found \"ten\""
// Overrides ("key.path=value") are typed by the schema: "optim.lr=0.1" is a number,
// "optim.nesterov=true" a bool, "schedule.milestones=30,60" a list, "device=cuda:1" a string;
// they are applied after the file, in order, and validated like file keys.
// Top-level "provenance" and "resolved" objects (ember-train writes the git commit, the
// overrides, the start time and the host, and the batch and learning rate the run trained with,
// into a run's config.json) are accepted and ignored, so a run directory's config.json can be run
// again as it is.
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <ember/core/shape.h>  // MemoryFormat

namespace ember::train {

/// precision: fp32, or autocast to bfloat16 / float16 (fp16 with a gradient scaler).
enum class Precision { fp32, bf16, fp16 };
/// train.on_nonfinite: what a NaN or inf training loss does.
enum class NonFinitePolicy { stop, skip };
/// parallel.mode: one device, DataParallel in one process, or DistributedDataParallel.
enum class ParallelMode { none, dp, ddp };
/// model.name: the models of ember's zoo (models/).
enum class ModelKind { mnist_cnn, cifar_cnn, resnet18, wide_resnet };
/// data.dataset: "mnist" reads any MNIST-format IDX set (e.g. Fashion-MNIST); "synthetic" is
/// random images and labels of CIFAR-10's shape, no files.
enum class DatasetKind { mnist, cifar10, cifar100, synthetic };
/// optim.name
enum class OptimizerKind { sgd, adam, adamw };
/// schedule.name
enum class ScheduleKind { none, step, multistep, cosine, onecycle };
/// optim.lr_scaling: how optim.lr follows the global batch (Goyal et al., 2017: linear).
enum class LrScaling { none, linear, sqrt };

/// The config's spelling of each value of an enum key, in the enum's order: the schema's choices,
/// parsed once when a config is read (ExperimentConfig holds the enums).
template <typename E> struct ConfigNames;
template <> struct ConfigNames<Precision> { static constexpr const char* values[] = {"fp32", "bf16", "fp16"}; };
template <> struct ConfigNames<NonFinitePolicy> { static constexpr const char* values[] = {"stop", "skip"}; };
template <> struct ConfigNames<ParallelMode> { static constexpr const char* values[] = {"none", "dp", "ddp"}; };
template <> struct ConfigNames<ModelKind> {
  static constexpr const char* values[] = {"mnist_cnn", "cifar_cnn", "resnet18", "wide_resnet"};
};
template <> struct ConfigNames<DatasetKind> {
  static constexpr const char* values[] = {"mnist", "cifar10", "cifar100", "synthetic"};
};
template <> struct ConfigNames<OptimizerKind> { static constexpr const char* values[] = {"sgd", "adam", "adamw"}; };
template <> struct ConfigNames<ScheduleKind> {
  static constexpr const char* values[] = {"none", "step", "multistep", "cosine", "onecycle"};
};
template <> struct ConfigNames<LrScaling> { static constexpr const char* values[] = {"none", "linear", "sqrt"}; };
template <> struct ConfigNames<MemoryFormat> {
  static constexpr const char* values[] = {"contiguous", "channels_last"};
};

/// The config's spelling of `value`: config_name(ModelKind::resnet18) == "resnet18".
template <typename E> const char* config_name(E value) { return ConfigNames<E>::values[static_cast<size_t>(value)]; }

[[noreturn]] void throw_unknown_config_name(const std::string& key, const std::string& text,
                                            const std::vector<std::string>& choices);
/// The value `text` spells; another string is an error naming `key` and the choices.
template <typename E> E parse_config_name(const std::string& text, const std::string& key) {
  const auto& names = ConfigNames<E>::values;
  for (size_t i = 0; i < std::size(names); ++i)
    if (text == names[i]) return static_cast<E>(i);
  throw_unknown_config_name(key, text, std::vector<std::string>(std::begin(names), std::end(names)));
}

/// model.*
struct ModelConfig {
  ModelKind name = ModelKind::mnist_cnn;
  /// wide_resnet only: depth (6k+4, >= 10), widen factor (>= 1), dropout between convs in a block.
  int64_t depth = 28;
  int64_t widen = 10;
  /// Dropout probability in [0, 1): wide_resnet's in-block dropout, cifar_cnn's before the
  /// classifier; mnist_cnn and resnet18 ignore it (mnist_cnn has its fixed 0.25/0.5).
  double dropout = 0.0;
  friend bool operator==(const ModelConfig&, const ModelConfig&) = default;
};

/// data.*
struct DataConfig {
  DatasetKind dataset = DatasetKind::mnist;
  /// Directory of the files. Empty: the dataset's default (see default_data_path()).
  std::string path;
  /// Training images per batch on each process (under ddp, per rank).
  int64_t batch_size = 64;
  /// Images per optimizer step over all processes (batch_size x ranks x train.accumulation_steps);
  /// when set (> 0) it replaces batch_size, which becomes this / (ranks x accumulation_steps): a
  /// global batch not divisible so is an error (resolve_batch_scaling). 0: batch_size rules.
  int64_t global_batch_size = 0;
  int64_t test_batch_size = 1000;
  /// Worker threads collating batches (host mode). >= 0.
  int64_t workers = 1;
  /// Training augmentation: CIFAR random crop 32 (padding 4) + horizontal flip; MNIST none.
  bool augment = false;
  /// Keep the whole dataset on the device and batch there (see data::DataLoader).
  bool resident = false;
  /// Use only the first N training / test examples (0: all). For synthetic data the split sizes
  /// are 50000 / 10000 before these limits.
  int64_t limit_train = 0;
  int64_t limit_test = 0;
  friend bool operator==(const DataConfig&, const DataConfig&) = default;
};

/// optim.*
struct OptimConfig {
  OptimizerKind name = OptimizerKind::sgd;
  double lr = 0.1;  // > 0
  double momentum = 0.0;  // sgd, in [0, 1)
  bool nesterov = false;  // sgd (needs momentum > 0)
  double weight_decay = 0.0;  // >= 0
  std::pair<double, double> betas = {0.9, 0.999};  // adam/adamw, each in [0, 1); JSON [b1, b2]
  double eps = 1e-8;  // adam/adamw, > 0
  /// Clip the gradients' global L2 norm to this before each step (0: no clipping); under fp16 the
  /// gradients are unscaled first.
  double clip_grad_norm = 0.0;
  /// lr is the rate for reference_batch_size images per step; the run trains at lr x (B / ref)
  /// (linear) or lr x sqrt(B / ref) (sqrt), B its global batch; none: lr as it is.
  LrScaling lr_scaling = LrScaling::none;
  int64_t reference_batch_size = 256;  // >= 1
  friend bool operator==(const OptimConfig&, const OptimConfig&) = default;
};

/// schedule.* All lengths are in epochs; the trainer steps the schedule once per optimizer step,
/// converting epochs to steps, so epoch-wise schedules change exactly at epoch boundaries.
struct ScheduleConfig {
  ScheduleKind name = ScheduleKind::none;
  int64_t step_size = 30;  // step: epochs between decays (>= 1)
  double gamma = 0.1;  // step, multistep: decay factor in (0, 1]
  std::vector<int64_t> milestones;  // multistep: epochs (each >= 1, ascending)
  int64_t t_max = 0;  // cosine: period in epochs (0: the run's epochs)
  double eta_min = 0.0;  // cosine: final lr (>= 0)
  double max_lr = 0.0;  // onecycle: peak lr (0: optim.lr)
  double pct_start = 0.3;  // onecycle: fraction of steps rising, in (0, 1)
  /// Linear warm-up from 0.1 x lr over this many epochs in front of the schedule (0: none).
  /// Not combinable with onecycle (it has its own warm-up).
  int64_t warmup_epochs = 0;
  friend bool operator==(const ScheduleConfig&, const ScheduleConfig&) = default;
};

/// early_stop.*
///   With target_accuracy: stop once test_acc >= target for `patience` consecutive epochs
///   (patience 0 counts as 1). Without: stop when test_acc has not improved on the best by more
///   than min_delta for `patience` epochs; patience 0 disables early stopping.
struct EarlyStopConfig {
  std::optional<double> target_accuracy;  // in (0, 1]; JSON null or absent: none
  int64_t patience = 0;  // >= 0
  double min_delta = 0.0;  // >= 0
  friend bool operator==(const EarlyStopConfig&, const EarlyStopConfig&) = default;
};

/// checkpoint.*
struct CheckpointConfig {
  /// Write checkpoints/epoch_N.ckpt every this many epochs (0: never; last.ckpt is written every
  /// epoch and best.ckpt at each new best regardless).
  int64_t every_epochs = 1;
  /// Keep the newest this many epoch_N.ckpt files (0: keep all).
  int64_t keep_last = 2;
  /// Write checkpoints/best.ckpt whenever test_acc reaches a new best.
  bool keep_best = true;
  /// "" (start fresh), "auto" (continue the run directory's checkpoints/last.ckpt when it
  /// exists, else start fresh), or the path of a checkpoint file.
  std::string resume;
  friend bool operator==(const CheckpointConfig&, const CheckpointConfig&) = default;
};

/// output.*
struct OutputConfig {
  /// Parent of run directories named <name>-<YYYYmmdd-HHMMSS>.
  std::string dir = "runs";
  /// An explicit run directory (overrides dir; required for resume=auto to find an earlier run).
  std::string run_dir;
  /// Seconds between progress lines written to log.txt (and to stdout when it is not a terminal).
  double log_interval = 10.0;
  /// Also write the epochs' metrics (and the config as hyperparameters) as a TensorBoard event file
  /// in the run directory (train/tensorboard.h; rank 0 only): `tensorboard --logdir <output.dir>`.
  bool tensorboard = false;
  friend bool operator==(const OutputConfig&, const OutputConfig&) = default;
};

/// train.*
struct LoopConfig {
  /// Batches whose gradients are summed before each optimizer step (each loss scaled by 1/N;
  /// under DDP all but the last are run under no_sync, so gradients are reduced once per step).
  int64_t accumulation_steps = 1;
  /// What a training loss that is NaN or inf does: "stop" (the run ends with an error naming the
  /// epoch and batch, before that epoch's checkpoint) or "skip" (that optimizer step is not taken).
  NonFinitePolicy on_nonfinite = NonFinitePolicy::stop;
  /// Deterministic algorithms only (ember::set_deterministic(true) for the run, core/determinism.h):
  /// bitwise-reproducible GPU steps, or an error naming an op that has no deterministic path.
  bool deterministic = false;
  /// Capture one whole training step (forward, loss, backward, optimizer step) as a CUDA graph after
  /// three eager warm-up steps and replay it for every later batch of the same shape
  /// (docs/cuda_graphs.md). Needs a CUDA device, parallel.mode none, precision fp32 or bf16,
  /// accumulation_steps 1, on_nonfinite stop and no profile.
  bool cuda_graphs = false;
  friend bool operator==(const LoopConfig&, const LoopConfig&) = default;
};

/// parallel.*
struct ParallelConfig {
  /// none | dp (parallel::DataParallel: one process, the devices below) | ddp
  /// (parallel::DistributedDataParallel: one process per device, started by ember-run, torchrun,
  /// srun or mpirun; data.batch_size is per process).
  ParallelMode mode = ParallelMode::none;
  /// dp: the devices ("cpu", "cuda:1", repeats allowed); empty: every visible GPU.
  std::vector<std::string> devices;
  /// ddp: auto (nccl for CUDA tensors when usable, else tcp) | nccl | tcp.
  std::string backend = "auto";
  /// ddp with nccl: native (ncclAllReduce) | ring (ember's ring over ncclSend/ncclRecv).
  std::string algorithm = "native";
  /// ddp: gradient bucket size in MiB (> 0).
  double bucket_cap_mb = 25;
  /// ddp: seconds a collective may take before it is an error naming the missing rank (> 0);
  /// unset (null): EMBER_COLLECTIVE_TIMEOUT when set, else 300 (parallel::collective_timeout_from_env).
  std::optional<double> timeout_s;
  /// ddp: every BatchNorm2d normalizes with the statistics of the global batch of all ranks
  /// (parallel::convert_sync_batchnorm).
  bool sync_batchnorm = false;
  /// ddp: 1 splits the optimizer state over the ranks (ZeRO stage 1,
  /// parallel::ZeroRedundancyOptimizer); 0 keeps a whole copy on each.
  int64_t zero = 0;
  /// ddp: none | fp16 | bf16: gradient buckets travel as f16 / bf16 (parallel::fp16_compress_hook,
  /// bf16_compress_hook): half the bytes of f32 on the wire, at that dtype's precision.
  std::string comm_hook = "none";
  friend bool operator==(const ParallelConfig&, const ParallelConfig&) = default;
};

/// profile.*: profiler::Profile over a few training steps (docs/profiling.md).
struct ProfileConfig {
  /// Profile the run: <run dir>/profile/trace.json (Chrome trace) and ops.md (per-span table).
  bool enabled = false;
  /// Steps (batches) skipped, then recorded and dropped, then kept: torch.profiler.schedule's
  /// wait, warmup and active, once from the start of the run.
  int64_t wait = 1, warmup = 1, active = 3;
  /// Ops' spans carry their inputs' shapes and dtypes (profiler::ProfileOptions::record_shapes).
  bool record_shapes = false;
  /// The allocators' bytes-in-use counters in the trace (profiler::ProfileOptions::memory).
  bool memory = true;
  friend bool operator==(const ProfileConfig&, const ProfileConfig&) = default;
};

struct ExperimentConfig {
  /// What the experiment shows (free text; configs/ files carry one).
  std::string description;
  /// Run name: letters, digits, '-', '_', '.' (it names the run directory).
  std::string name = "run";
  uint64_t seed = 1;
  /// auto | cpu | cuda | cuda:N
  std::string device = "auto";
  int64_t epochs = 10;  // >= 1
  /// fp32 | bf16 (autocast to bfloat16) | fp16 (autocast to float16 with a gradient scaler). The
  /// parameters stay f32 either way (amp::Autocast, amp::GradScaler; docs/amp.md).
  Precision precision = Precision::fp32;
  /// contiguous | channels_last: the layout of the model's 4-D weights and of every input batch
  /// (Module::to(MemoryFormat), Tensor::contiguous(MemoryFormat); tensor cores prefer NHWC).
  MemoryFormat memory_format = MemoryFormat::contiguous;
  ModelConfig model;
  DataConfig data;
  OptimConfig optim;
  ScheduleConfig schedule;
  EarlyStopConfig early_stop;
  CheckpointConfig checkpoint;
  OutputConfig output;
  LoopConfig train;
  ParallelConfig parallel;
  ProfileConfig profile;
  friend bool operator==(const ExperimentConfig&, const ExperimentConfig&) = default;
};

/// Parses JSON text (`source` names it in errors: a file path or "<string>"), applies the
/// overrides in order and validates everything. Throws one ember::Error holding every problem of
/// the file and the overrides ("<source>: N problems:", one line each; a single one as it is);
/// malformed JSON stops at once, naming the source, line and column.
ExperimentConfig parse_config(const std::string& json_text, const std::vector<std::string>& overrides = {},
                              const std::string& source = "<string>");
/// Reads `path` and calls parse_config; an unreadable file is an error naming it.
ExperimentConfig load_config(const std::string& path, const std::vector<std::string>& overrides = {});

/// The resolved config as pretty JSON (every key, defaults filled in; target_accuracy null when
/// unset). parse_config(to_json(c)) == c.
std::string to_json(const ExperimentConfig& config, int indent = 2);

/// Every valid key path ("optim.lr", "data.batch_size", ...), in schema order.
std::vector<std::string> config_key_paths();

/// The batch and learning rate a config trains with on `processes` processes (ddp: the world
/// size; otherwise 1, DataParallel splitting each batch inside its process).
struct BatchScaling {
  int64_t per_process = 0;  // the training loader's batch size
  int64_t global = 0;  // images per optimizer step: per_process x processes x accumulation_steps
  double lr = 0;  // optim.lr after optim.lr_scaling
  /// How lr came about: "lr 0.1 x 512/256 (linear) = 0.2", "lr 0.1 x sqrt(512/256) = 0.141421";
  /// "" without optim.lr_scaling.
  std::string lr_text;
};
/// data.global_batch_size and optim.lr_scaling resolved for `processes`; a global batch that does
/// not divide into processes x train.accumulation_steps is an error naming the numbers.
BatchScaling resolve_batch_scaling(const ExperimentConfig& config, int64_t processes);

/// data.path, or the dataset's default when empty: mnist -> /usr/share/datasets/fashion-mnist,
/// cifar10 -> data/cifar10, cifar100 -> data/cifar100, synthetic -> "".
std::string default_data_path(const DataConfig& data);

}  // namespace ember::train
