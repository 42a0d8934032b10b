// Ten training steps against an independent torch implementation of the same equations
// (tools/reference/gen_train_fixtures.py): Muon + AdamW, clipping, WSD, two micro-batches per step, and
// the Adam balancing controller.

#include <gtest/gtest.h>

#include "backend/ops.h"
#include "dist/communicator.h"
#include "model/model_io.h"
#include "optim/schedule.h"
#include "train/train_step.h"
#include "unit/reference_data.h"
#include "unit/test_util.h"

namespace zaya {
namespace {

TEST(TrainReference, TenStepsMatchTheTorchReference) {
  LoadedModel loaded = load_model(test::fixture("train/initial"));
  const test::ReferenceData ref(test::fixture("train/reference.safetensors"));
  const Shape shape = ref.shape("windows");  // [steps, micro, batch, seq + 1]
  const int64_t steps = shape[0], micro = shape[1], batch = shape[2], window = shape[3], seq = window - 1;
  const std::vector<int32_t> windows = ref.ints("windows");

  OptimizerConfig config;
  config.lr = 0.01f;
  config.weight_decay = 0.1f;
  config.grad_clip = 1.0f;
  config.adamw = {0.9f, 0.95f, 1e-8f, 1.0f};
  BalancingConfig balancing_config;
  balancing_config.lr = 1e-2f;
  ScheduleConfig schedule{ScheduleKind::Wsd, 256, 0.3, DecayShape::Linear, 0.1};

  ZayaModel model(*loaded.params, cpu_ops());
  Optimizer optimizer(*loaded.params, config, cpu_ops());
  BalancingController balancing(balancing_config, loaded.params->dims().layers,
                                loaded.params->dims().experts);
  const std::unique_ptr<Communicator> comm = make_single_process_communicator();
  const std::unique_ptr<TrainStep> step = test::one_process_train_step(model, optimizer, balancing, *comm);
  TrainStep& train = *step;

  const std::vector<float> want_loss = ref.floats("loss"), want_norm = ref.floats("grad_norm");
  const std::vector<float> want_lr = ref.floats("lr_factor");
  const int64_t tokens_per_step = micro * batch * seq;
  for (int64_t step = 0; step < steps; ++step) {
    std::vector<std::vector<int32_t>> ids(static_cast<size_t>(micro)), labels(static_cast<size_t>(micro));
    std::vector<Batch> batches;
    for (int64_t m = 0; m < micro; ++m) {
      for (int64_t b = 0; b < batch; ++b) {
        const int32_t* w = windows.data() + ((step * micro + m) * batch + b) * window;
        ids[size_t(m)].insert(ids[size_t(m)].end(), w, w + seq);
        labels[size_t(m)].insert(labels[size_t(m)].end(), w + 1, w + window);
      }
      batches.push_back({ids[size_t(m)].data(), labels[size_t(m)].data(), nullptr, batch, seq});
    }
    const double lr_factor = lr_multiplier(schedule, (step + 1) * tokens_per_step, steps * tokens_per_step);
    EXPECT_NEAR(lr_factor, want_lr[size_t(step)], 1e-6);
    const StepReport report = train.run(batches, lr_factor);
    ASSERT_FALSE(report.skipped);
    EXPECT_NEAR(report.loss, want_loss[size_t(step)], 1e-4) << "step " << step + 1;
    EXPECT_NEAR(report.optimizer.grad_norm, want_norm[size_t(step)], 1e-3 * want_norm[size_t(step)]);
  }

  double worst = 0;
  std::string worst_name;
  for (const ParamInfo& param : loaded.params->table().params()) {
    const std::vector<float> want = ref.floats("final." + param.name);
    const float* got = loaded.params->value(param);
    const double error = test::relative_error(std::vector<float>(got, got + param.numel()), want);
    EXPECT_LE(error, 1e-4) << param.name;
    if (error > worst) worst = error, worst_name = param.name;
  }
  std::printf("worst relative parameter error after %lld steps: %.2e (%s)\n", (long long)steps, worst,
              worst_name.c_str());
}

}  // namespace
}  // namespace zaya
