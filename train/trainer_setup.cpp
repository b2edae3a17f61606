// The ways into a Trainer (train/trainer.h): a user's parts, or an experiment config that builds
// the same parts and options and takes the same constructor.
#include <ember/train/trainer.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include <ember/core/determinism.h>
#include <ember/core/error.h>
#include <ember/core/rng.h>
#include <ember/core/stream.h>
#include <ember/data/distributed_sampler.h>
#include <ember/parallel/zero.h>
#include <ember/train/factories.h>
#include <ember/train/run_dir.h>
#include <ember/train/signals.h>

namespace ember::train {

namespace {

// What config.json records for a user's Trainer: its options in the config's form (the keys of
// parts it was handed keep their defaults; model.name and data.dataset are set by
// record_of_options).
ExperimentConfig config_of_options(const TrainerOptions& o) {
  ExperimentConfig c;
  c.description = "a Trainer built from a program's own parts";
  c.name = o.name;
  c.epochs = o.epochs;
  c.precision = o.precision;
  c.memory_format = o.channels_last ? MemoryFormat::channels_last : MemoryFormat::contiguous;
  c.optim.clip_grad_norm = o.clip_grad_norm;
  c.early_stop = o.early_stop;
  c.checkpoint = o.checkpoint;
  c.output = o.output;
  c.profile = o.profile;
  c.train.accumulation_steps = o.accumulation_steps;
  c.train.on_nonfinite = o.on_nonfinite;
  c.train.deterministic = ember::deterministic();  // the program's setting of the process-wide switch
  c.train.cuda_graphs = o.cuda_graphs;
  c.parallel = o.parallel;
  return c;
}

// config.json of a user's Trainer: config_of_options with the names of its model and dataset (any
// names: the file is a record of the run, not a config for ember-train).
std::string record_of_options(const ExperimentConfig& record, const std::string& model_name,
                              const std::string& dataset_name, const std::string& resumed_from) {
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(config_json_with_provenance(record, {}, resumed_from));
  j["model"]["name"] = model_name;
  j["data"]["dataset"] = dataset_name;
  return j.dump(2) + "\n";
}

}  // namespace

TrainerParts make_trainer_parts(const ExperimentConfig& c) {
  check_data_available(c.data);
  TrainerParts parts;
  // The device before the run directory: a config naming a missing GPU writes nothing.
  parts.parallel = start_parallel(c);
  const ParallelRun& par = parts.parallel;
  DeviceGuard device_guard(par.device);
  // train.deterministic: the process-wide switch, before anything runs an op (the start lines say so).
  ember::set_deterministic(c.train.deterministic);
  if (c.train.deterministic)
    parts.notes.push_back(
        "deterministic algorithms on (train.deterministic): cuDNN engines not noted "
        "nondeterministic, sorted scatter-adds; docs/determinism.md");
  manual_seed(c.seed);
  const Datasets data = make_datasets(c.data, c.seed);
  std::shared_ptr<data::Sampler> train_shard, test_shard;
  if (par.mode == ParallelMode::ddp) {
    // Every rank its own share of one permutation per epoch; of the test split, in order.
    train_shard = std::make_shared<data::DistributedSampler>(data.train->size(), par.rank, par.world_size,
                                                             data::DistributedSamplerOptions{.seed = c.seed});
    test_shard = std::make_shared<data::DistributedSampler>(data.test->size(), par.rank, par.world_size,
                                                            data::DistributedSamplerOptions{.shuffle = false});
  }
  // data.global_batch_size and optim.lr_scaling for this run's processes.
  const BatchScaling scaling = resolve_batch_scaling(c, par.processes());
  DataConfig data_config = c.data;
  data_config.batch_size = scaling.per_process;
  OptimConfig optim_config = c.optim;
  optim_config.lr = scaling.lr;
  if (!scaling.lr_text.empty()) parts.notes.push_back(scaling.lr_text);
  parts.train_loader = make_train_loader(data, data_config, par.device, c.seed, train_shard);
  parts.test_loader = make_test_loader(data, c.data, par.device, test_shard);
  // The default generator initialises the model and feeds its dropout, so capture_rng() in every
  // checkpoint covers all randomness of the model (the loaders' streams are pure functions).
  parts.model = make_model(c.model, data.num_classes, *data.train, default_generator());
  if (c.parallel.zero == 1 && par.mode == ParallelMode::ddp) {
    // ZeRO-1: this rank keeps the optimizer state of its share of the parameters only.
    parts.optimizer = std::make_unique<parallel::ZeroRedundancyOptimizer>(
        parts.model->parameters(), par.group,
        [optim_config](std::vector<Tensor> shard) { return make_optimizer(optim_config, std::move(shard)); });
  } else {
    parts.optimizer = make_optimizer(optim_config, parts.model->parameters());
  }
  const int64_t steps_per_epoch =
      (parts.train_loader->len() + c.train.accumulation_steps - 1) / c.train.accumulation_steps;
  parts.schedule = make_schedule(c.schedule, *parts.optimizer, steps_per_epoch, c.epochs);
  return parts;
}

TrainerOptions trainer_options(const ExperimentConfig& c, const std::vector<std::string>& overrides) {
  TrainerOptions o;
  o.name = c.name;
  o.epochs = c.epochs;
  o.precision = c.precision;
  o.channels_last = c.memory_format == MemoryFormat::channels_last;
  o.accumulation_steps = c.train.accumulation_steps;
  o.on_nonfinite = c.train.on_nonfinite;
  o.cuda_graphs = c.train.cuda_graphs;
  o.clip_grad_norm = c.optim.clip_grad_norm;
  o.early_stop = c.early_stop;
  o.checkpoint = c.checkpoint;
  o.output = c.output;
  o.profile = c.profile;
  o.parallel = c.parallel;
  o.model_name = config_name(c.model.name);
  o.dataset_name = config_name(c.data.dataset);
  o.config_json = [c, overrides](const std::string& resumed_from) {
    return config_json_with_provenance(c, overrides, resumed_from);
  };
  return o;
}

Trainer::Trainer(TrainerParts parts, TrainerOptions options) : parts_(std::move(parts)), options_(std::move(options)) {
  EMBER_CHECK(parts_.model && parts_.optimizer && parts_.train_loader && parts_.test_loader,
              "Trainer: TrainerParts needs a model, an optimizer, a train_loader and a test_loader; missing:",
              parts_.model ? "" : " model", parts_.optimizer ? "" : " optimizer",
              parts_.train_loader ? "" : " train_loader", parts_.test_loader ? "" : " test_loader");
  EMBER_CHECK(options_.epochs >= 1 && options_.accumulation_steps >= 1, "Trainer: expected epochs >= 1 and ",
              "accumulation_steps >= 1, found ", options_.epochs, " and ", options_.accumulation_steps);
  if (!options_.config_json) {
    options_.config_json = [record = config_of_options(options_), model = options_.model_name,
                            dataset = options_.dataset_name](const std::string& resumed_from) {
      return record_of_options(record, model, dataset, resumed_from);
    };
  }
}

// The guard comes first (an argument of the delegating call): a signal while the data is read
// stops at the run's first check instead of killing the process without a checkpoint.
Trainer::Trainer(const ExperimentConfig& config, std::vector<std::string> overrides)
    : Trainer(std::make_unique<StopSignalGuard>(), config, overrides) {}

Trainer::Trainer(std::unique_ptr<StopSignalGuard> guard, const ExperimentConfig& config,
                 const std::vector<std::string>& overrides)
    : Trainer(make_trainer_parts(config), trainer_options(config, overrides)) {
  guard_ = std::move(guard);
}

}  // namespace ember::train
