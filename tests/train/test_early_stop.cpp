// Early stopping (train/early_stop.h): a table of accuracy sequences with the epoch and rule at
// which each must stop, the min_delta edge (exactly min_delta is not an improvement), a target
// reached and lost again, disabled configs, the reason sentences, and a state round trip.
//
// Accuracies in the min_delta cases are dyadic fractions (k / 2^n) so that best + min_delta is
// exact in binary and "exactly min_delta" really is exactly that, not that plus rounding.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include <ember/core/error.h>
#include <ember/train/early_stop.h>

using ember::train::EarlyStopConfig;
using ember::train::EarlyStopping;

namespace {

EarlyStopConfig make_config(std::optional<double> target, int64_t patience, double min_delta) {
  EarlyStopConfig c;
  c.target_accuracy = target;
  c.patience = patience;
  c.min_delta = min_delta;
  return c;
}

struct Outcome {
  int64_t stop_epoch = 0;  // 0: never stopped
  std::string rule;
};

// Feeds accs as epochs 1, 2, ... and reports the first epoch at which update() returned true.
Outcome run(const EarlyStopConfig& config, const std::vector<double>& accs) {
  EarlyStopping es(config);
  for (size_t i = 0; i < accs.size(); ++i) {
    const int64_t epoch = static_cast<int64_t>(i) + 1;
    if (es.update(epoch, accs[i])) return {epoch, es.rule()};
    REQUIRE_FALSE(es.stopped());
    REQUIRE(es.rule().empty());
    REQUIRE(es.reason().empty());
  }
  return {0, ""};
}

struct Case {
  const char* name;
  EarlyStopConfig config;
  std::vector<double> accs;
  int64_t stop_epoch;
  const char* rule;
};

}  // namespace

TEST_CASE("EarlyStopping stops at the expected epoch by the expected rule", "[cpu]") {
  const std::vector<Case> cases = {
      // ---- patience rule ----
      {"patience 2, improving every epoch", make_config({}, 2, 0), {0.1, 0.2, 0.3, 0.4, 0.5}, 0, ""},
      {"patience 2, plateau after epoch 2", make_config({}, 2, 0), {0.1, 0.5, 0.5, 0.5, 0.9}, 4, "patience"},
      {"patience 2, drop then recovery resets the count",
       make_config({}, 2, 0),
       {0.5, 0.4, 0.6, 0.3, 0.2},
       5,
       "patience"},
      {"patience 1 stops on the first non-improving epoch", make_config({}, 1, 0), {0.5, 0.625, 0.625}, 3, "patience"},
      {"patience 3, equal accuracy is no improvement with min_delta 0",
       make_config({}, 3, 0),
       {0.5, 0.5, 0.5, 0.5},
       4,
       "patience"},
      // min_delta 0.125: exactly +0.125 does not count, +0.1875 does.
      {"gain of exactly min_delta is not an improvement",
       make_config({}, 2, 0.125),
       {0.5, 0.625, 0.625},
       3,
       "patience"},
      {"gain just above min_delta is an improvement", make_config({}, 2, 0.125), {0.5, 0.6875, 0.875, 0.875}, 0, ""},
      // Small gains accumulate against the last real improvement (0.5), not the last epoch:
      // 0.5625 and 0.625 are within min_delta of 0.5, 0.6875 beats it by 0.1875.
      {"small gains are measured from the last improvement",
       make_config({}, 3, 0.125),
       {0.5, 0.5625, 0.625, 0.6875, 0.6875, 0.6875},
       0,
       ""},
      {"small gains alone never reset the count",
       make_config({}, 3, 0.125),
       {0.5, 0.5625, 0.59375, 0.609375},
       4,
       "patience"},
      {"patience 0 without target never stops", make_config({}, 0, 0), {0.5, 0.5, 0.5, 0.5, 0.5, 0.5}, 0, ""},
      // ---- target rule ----
      {"target, patience 0 counts as 1", make_config(0.75, 0, 0), {0.5, 0.625, 0.75, 0.5}, 3, "target"},
      {"target, patience 1", make_config(0.75, 1, 0), {0.5, 0.875}, 2, "target"},
      {"target, patience 2 needs two consecutive epochs", make_config(0.75, 2, 0), {0.75, 0.5, 0.75, 0.8}, 4, "target"},
      {"target reached then lost resets the streak",
       make_config(0.75, 3, 0),
       {0.8, 0.8, 0.7, 0.8, 0.8, 0.9},
       6,
       "target"},
      {"target never held long enough", make_config(0.75, 3, 0), {0.8, 0.8, 0.7, 0.8, 0.8, 0.7}, 0, ""},
      // With a target the patience rule is off: a long plateau below target does not stop.
      {"target set: plateau below target does not trigger patience",
       make_config(0.9, 2, 0),
       {0.5, 0.5, 0.5, 0.5, 0.5},
       0,
       ""},
      {"target 1.0 is reachable exactly", make_config(1.0, 1, 0), {0.99, 1.0}, 2, "target"},
  };
  for (const Case& c : cases) {
    INFO(c.name);
    const Outcome o = run(c.config, c.accs);
    CHECK(o.stop_epoch == c.stop_epoch);
    CHECK(o.rule == c.rule);
  }
}

TEST_CASE("EarlyStopping reason sentences name the rule, the numbers and the epochs", "[cpu]") {
  {
    EarlyStopping es(make_config(0.92, 2, 0));
    CHECK_FALSE(es.update(1, 0.80));
    CHECK_FALSE(es.update(2, 0.93));
    CHECK(es.update(3, 0.95));
    CHECK(es.reason() == "target_accuracy 0.9200 reached for 2 consecutive epochs (epochs 2-3)");
    CHECK(es.rule() == "target");
    CHECK(es.state().target_epoch == 2);
  }
  {
    EarlyStopping es(make_config(0.92, 0, 0));
    CHECK(es.update(7, 0.925));
    CHECK(es.reason() == "target_accuracy 0.9200 reached for 1 consecutive epoch (epoch 7)");
  }
  {
    EarlyStopping es(make_config({}, 3, 0.001));
    CHECK_FALSE(es.update(1, 0.90));
    CHECK_FALSE(es.update(2, 0.92));
    CHECK_FALSE(es.update(3, 0.931));
    CHECK_FALSE(es.update(4, 0.9311));  // +0.0001 <= min_delta
    CHECK_FALSE(es.update(5, 0.925));
    CHECK(es.update(6, 0.93));
    CHECK(es.reason() == "no improvement > 0.001 for 3 epochs (best 0.9310 at epoch 3)");
    CHECK(es.rule() == "patience");
  }
  {
    EarlyStopping es(make_config({}, 1, 0));
    CHECK_FALSE(es.update(1, 0.5));
    CHECK(es.update(2, 0.25));
    CHECK(es.reason() == "no improvement > 0 for 1 epoch (best 0.5000 at epoch 1)");
  }
}

TEST_CASE("EarlyStopping state tracks best, streak, target epoch and epochs since improvement", "[cpu]") {
  EarlyStopping es(make_config(0.75, 3, 0));
  EarlyStopping::State want;
  CHECK(es.state() == want);  // nothing recorded yet

  es.update(1, 0.5);
  want = {0.5, 1, 0, 0, 0};
  CHECK(es.state() == want);
  es.update(2, 0.8);
  want = {0.8, 2, 1, 0, 2};
  CHECK(es.state() == want);
  es.update(3, 0.7);  // below target: streak resets, target_epoch stays the first one
  want = {0.8, 2, 0, 1, 2};
  CHECK(es.state() == want);
  es.update(4, 0.75);
  want = {0.8, 2, 1, 2, 2};
  CHECK(es.state() == want);
}

TEST_CASE("EarlyStopping with target and patience 0 disabled never stops and says so", "[cpu]") {
  EarlyStopping off(make_config({}, 0, 0.5));
  CHECK_FALSE(off.enabled());
  for (int64_t e = 1; e <= 50; ++e) CHECK_FALSE(off.update(e, 0.25));
  CHECK_FALSE(off.stopped());
  CHECK(off.reason().empty());
  CHECK(off.rule().empty());
  // The best is still tracked (checkpoints save it either way).
  CHECK(off.state().best_acc == 0.25);
  CHECK(off.state().since_improvement == 49);

  CHECK(EarlyStopping(make_config({}, 1, 0)).enabled());
  CHECK(EarlyStopping(make_config(0.5, 0, 0)).enabled());
}

TEST_CASE("EarlyStopping state round trip continues identically", "[cpu]") {
  const std::vector<double> accs = {0.5, 0.625, 0.625, 0.75, 0.7, 0.8, 0.8, 0.79, 0.78, 0.77, 0.76};
  const std::vector<EarlyStopConfig> configs = {make_config({}, 3, 0.0078125), make_config(0.78, 3, 0),
                                                make_config({}, 0, 0)};
  for (const EarlyStopConfig& config : configs) {
    // Uninterrupted reference run.
    EarlyStopping ref(config);
    std::vector<bool> ref_stop;
    std::vector<EarlyStopping::State> ref_states;
    for (size_t i = 0; i < accs.size(); ++i) {
      ref_stop.push_back(ref.update(static_cast<int64_t>(i) + 1, accs[i]));
      ref_states.push_back(ref.state());
      if (ref_stop.back()) break;
    }
    // Resume after every possible epoch from the saved state.
    for (size_t cut = 1; cut < ref_stop.size(); ++cut) {
      INFO("resume after epoch " << cut);
      EarlyStopping resumed(config);
      resumed.set_state(ref_states[cut - 1]);
      CHECK(resumed.state() == ref_states[cut - 1]);
      for (size_t i = cut; i < ref_stop.size(); ++i) {
        CHECK(resumed.update(static_cast<int64_t>(i) + 1, accs[i]) == ref_stop[i]);
        CHECK(resumed.state() == ref_states[i]);
      }
      CHECK(resumed.reason() == ref.reason());
      CHECK(resumed.rule() == ref.rule());
    }
  }
}

TEST_CASE("EarlyStopping stays stopped and rejects bad input", "[cpu]") {
  EarlyStopping es(make_config({}, 1, 0));
  es.update(1, 0.5);
  REQUIRE(es.update(2, 0.5));
  const auto state = es.state();
  const std::string reason = es.reason();
  CHECK(es.update(3, 0.9));  // the decision stands and the state does not move on
  CHECK(es.state() == state);
  CHECK(es.reason() == reason);

  EarlyStopping fresh(make_config({}, 2, 0));
  CHECK_THROWS_WITH(fresh.update(1, std::nan("")), Catch::Contains("epoch 1") && Catch::Contains("finite"));
  CHECK_THROWS_AS(EarlyStopping(make_config({}, -1, 0)), ember::Error);
  CHECK_THROWS_WITH(EarlyStopping(make_config({}, -1, 0)), Catch::Contains("early_stop.patience"));
  CHECK_THROWS_WITH(EarlyStopping(make_config({}, 1, -0.5)), Catch::Contains("early_stop.min_delta"));
  CHECK_THROWS_WITH(EarlyStopping(make_config(1.5, 1, 0)), Catch::Contains("early_stop.target_accuracy"));
  CHECK_THROWS_WITH(EarlyStopping(make_config(0.0, 1, 0)), Catch::Contains("early_stop.target_accuracy"));
}
