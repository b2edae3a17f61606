// train/train_step: the non-finite policies and the epoch metrics on their own (the trainer's
// runs in test_trainer.cpp cover the step itself).
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <string>

#include <ember/core/error.h>
#include <ember/kernels/factory.h>
#include <ember/train/train_step.h>
#include "support/error_of.h"

using namespace ember;
using namespace ember::train;
using ember::testing::error_of;

namespace {

Tensor scalar(double v) { return full({}, v, {.dtype = DType::f32}); }

}  // namespace

TEST_CASE("train_step: skip drops a step with a non-finite batch and counts it", "[cpu][train]") {
  const ParallelRun par;  // one process on the CPU
  NonFiniteWatch w(NonFinitePolicy::skip, par, Device::cpu());
  CHECK(w.skipping());
  // Step 1 of two batches: the first is NaN, so the second's backward must not run either.
  CHECK_FALSE(w.after_forward(scalar(std::nan("")), 1, false));
  CHECK(w.batch_bad());
  CHECK_FALSE(w.after_forward(scalar(0.5), 2, true));
  CHECK_FALSE(w.batch_bad());  // its loss counts in the mean
  CHECK(w.step_bad());
  w.end_step(true);
  CHECK(w.skipped_steps() == 1);
  // Step 2 is clean.
  CHECK(w.after_forward(scalar(0.25), 3, false));
  CHECK(w.after_forward(scalar(0.125), 4, true));
  CHECK_FALSE(w.step_bad());
  w.end_step(false);
  CHECK(w.skipped_steps() == 1);
  CHECK_NOTHROW(w.check_at_epoch_end(1, 4));  // skip never stops the run
}

TEST_CASE("train_step: stop names the epoch and the first bad batch, at a progress line and at the end",
          "[cpu][train]") {
  const ParallelRun par;
  NonFiniteWatch w(NonFinitePolicy::stop, par, Device::cpu());
  CHECK(w.after_forward(scalar(1.0), 1, true));
  CHECK_NOTHROW(w.check_at_progress(2, 5));
  CHECK(w.after_forward(scalar(std::numeric_limits<double>::infinity()), 2, true));  // backward still runs
  CHECK(w.after_forward(scalar(std::nan("")), 3, true));
  const std::string msg = error_of([&] { w.check_at_progress(2, 5); });
  CHECK(msg.find("NaN or inf at epoch 2, batch 2 of 5;") != std::string::npos);
  CHECK(msg.find("train.on_nonfinite=skip") != std::string::npos);
  CHECK(error_of([&] { w.check_at_epoch_end(2, 5); }).find("batch 2 of 5") != std::string::npos);
}

TEST_CASE("train_step: make_epoch_metrics averages over the finite batches only", "[cpu][train]") {
  EpochTotals t;
  t.loss_sum = 12.0;
  t.images = 10;
  t.dropped_images = 4;
  t.skipped_steps = 2;
  t.seconds = 2.0;
  t.lr = 0.125;
  t.phases.seconds = {0.5, 0.0, 0.75, 1.0, 0.25};
  t.cpu_seconds = 3;
  const EpochMetrics m = make_epoch_metrics(7, t);
  CHECK(m.epoch == 7);
  CHECK(m.train_loss == 2.0);  // 12 over the 6 images whose loss was finite
  CHECK(m.images_per_second == 5.0);  // every image trained through, dropped or not
  CHECK(m.nonfinite_steps == 2);
  CHECK(m.lr == 0.125);
  CHECK(m.data_wait_seconds == 0.5);
  CHECK(m.forward_seconds == 0.75);
  CHECK(m.backward_seconds == 1.0);
  CHECK(m.optimizer_seconds == 0.25);
  CHECK_FALSE(m.h2d_copied);
  CHECK(m.cpu_seconds == 3);
  t.dropped_images = 10;
  t.seconds = 0;
  const EpochMetrics none = make_epoch_metrics(1, t);
  CHECK(none.train_loss == 0);  // no finite batch: 0, not a division by zero
  CHECK(none.images_per_second == 0);
}
