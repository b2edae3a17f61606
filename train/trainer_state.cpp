// RunState <-> checkpoint metadata (train/trainer_state.h).
#include <ember/train/trainer_state.h>

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <ember/core/error.h>
#include <ember/data/distributed_sampler.h>

namespace ember::train {

namespace {

// Marks metadata written by this code; its absence means "not an ember-train checkpoint".
constexpr const char* kMarkerKey = "ember_train_state";
constexpr const char* kMarkerValue = "1";

std::string exact(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);  // 17 digits: the double reads back unchanged
  return buf;
}

class Reader {
 public:
  Reader(const std::map<std::string, std::string>& meta, const std::string& source) : meta_(meta), source_(source) {}

  const std::string& text(const std::string& key) const {
    auto it = meta_.find(key);
    EMBER_CHECK(it != meta_.end(), "checkpoint '", source_, "': metadata key \"", key,
                "\" is missing (was it written by ember-train?)");
    return it->second;
  }
  double real(const std::string& key) const {
    const std::string& s = text(key);
    char* end = nullptr;
    errno = 0;
    const double v = std::strtod(s.c_str(), &end);
    // NaN is legitimate for a diverged loss sum; only the syntax is checked.
    EMBER_CHECK(!s.empty() && end == s.c_str() + s.size() && errno != ERANGE, "checkpoint '", source_,
                "': metadata key \"", key, "\": expected a number, found \"", s, "\"");
    return v;
  }
  int64_t integer(const std::string& key) const {
    const std::string& s = text(key);
    int64_t v = 0;
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    EMBER_CHECK(ec == std::errc() && end == s.data() + s.size(), "checkpoint '", source_, "': metadata key \"", key,
                "\": expected an integer, found \"", s, "\"");
    return v;
  }

 private:
  const std::map<std::string, std::string>& meta_;
  const std::string& source_;
};

std::string phase_key(int i) { return std::string("epoch_phase_") + phase_name(static_cast<Phase>(i)); }

}  // namespace

std::map<std::string, std::string> RunState::to_metadata() const {
  std::map<std::string, std::string> m;
  m.emplace(kMarkerKey, kMarkerValue);  // not m[k] = "...": GCC 12 warns falsely (-Wrestrict, PR 105329)
  m["train_seconds"] = exact(train_seconds);
  m["train_images"] = std::to_string(train_images);
  m["total_seconds"] = exact(total_seconds);
  m["time_to_target"] = time_to_target ? exact(*time_to_target) : "";
  m["best_test_acc"] = exact(best_acc);
  m["best_epoch"] = std::to_string(best_epoch);
  m["es_best_acc"] = exact(stopper.best_acc);
  m["es_best_epoch"] = std::to_string(stopper.best_epoch);
  m["es_at_target_streak"] = std::to_string(stopper.at_target_streak);
  m["es_since_improvement"] = std::to_string(stopper.since_improvement);
  m["es_target_epoch"] = std::to_string(stopper.target_epoch);
  m["early_stop_rule"] = early_stop_rule;
  m["early_stop_reason"] = early_stop_reason;
  m["epoch_loss_sum"] = exact(partial.loss_sum);
  m["epoch_images"] = std::to_string(partial.images);
  m["epoch_steps"] = std::to_string(partial.steps);
  m["epoch_seconds"] = exact(partial.seconds);
  m["epoch_lr"] = exact(partial.lr);
  for (int i = 0; i < kNumPhases; ++i) m[phase_key(i)] = exact(partial.phases.seconds[static_cast<size_t>(i)]);
  m["epoch_phase_steps"] = std::to_string(partial.phases.steps);
  return m;
}

RunState RunState::from_metadata(const std::map<std::string, std::string>& meta, const std::string& source) {
  Reader r(meta, source);
  EMBER_CHECK(r.text(kMarkerKey) == kMarkerValue, "checkpoint '", source, "': metadata key \"", kMarkerKey,
              "\": expected \"", kMarkerValue, "\", found \"", r.text(kMarkerKey), "\"");
  RunState s;
  s.train_seconds = r.real("train_seconds");
  s.train_images = r.integer("train_images");
  s.total_seconds = r.real("total_seconds");
  if (!r.text("time_to_target").empty()) s.time_to_target = r.real("time_to_target");
  s.best_acc = r.real("best_test_acc");
  s.best_epoch = r.integer("best_epoch");
  s.stopper.best_acc = r.real("es_best_acc");
  s.stopper.best_epoch = r.integer("es_best_epoch");
  s.stopper.at_target_streak = r.integer("es_at_target_streak");
  s.stopper.since_improvement = r.integer("es_since_improvement");
  s.stopper.target_epoch = r.integer("es_target_epoch");
  s.early_stop_rule = r.text("early_stop_rule");
  s.early_stop_reason = r.text("early_stop_reason");
  s.partial.loss_sum = r.real("epoch_loss_sum");
  s.partial.images = r.integer("epoch_images");
  s.partial.steps = r.integer("epoch_steps");
  s.partial.seconds = r.real("epoch_seconds");
  s.partial.lr = r.real("epoch_lr");
  for (int i = 0; i < kNumPhases; ++i) s.partial.phases.seconds[static_cast<size_t>(i)] = r.real(phase_key(i));
  s.partial.phases.steps = r.integer("epoch_phase_steps");
  EMBER_CHECK(s.partial.steps >= 0 && s.partial.images >= 0 && s.train_images >= 0, "checkpoint '", source,
              "': negative counters in the metadata (epoch_steps ", s.partial.steps, ", epoch_images ",
              s.partial.images, ", train_images ", s.train_images, ")");
  return s;
}

namespace {

// The value of a sampler state's entry `key` (an i64 tensor of one element), or `fallback`.
int64_t sampler_entry(const StateDict& saved, const std::string& key, int64_t fallback) {
  auto it = saved.find(key);
  return it == saved.end() ? fallback : it->second.to_vector<int64_t>().at(0);
}

}  // namespace

std::string restore_sampler(data::DataLoader& loader, const StateDict& saved) {
  const auto* shard = dynamic_cast<const data::DistributedSampler*>(&loader.sampler());
  const int64_t saved_world = sampler_entry(saved, "world_size", 1), world = shard ? shard->world_size() : 1;
  const bool saved_shard = saved.count("world_size") != 0;
  if (saved_shard == (shard != nullptr) && saved_world == world) {
    loader.load_state_dict(saved);  // checks every setting (dataset size, seed, position)
    return "";
  }
  const int64_t position = sampler_entry(saved, "position", 0);
  EMBER_CHECK(position == 0, "the checkpoint stopped ", position, " examples into an epoch of a run with ", saved_world,
              " process(es); only a checkpoint taken at an epoch's end can continue on ", world);
  loader.set_epoch(sampler_entry(saved, "epoch", 0));
  if (saved_world == world) return "";  // a DistributedSampler of one rank and a RandomSampler
  return "the checkpoint was written by a run of " + std::to_string(saved_world) + " process(es), this one has " +
         std::to_string(world) + ": the examples are shuffled and shared out differently from here on";
}

}  // namespace ember::train
