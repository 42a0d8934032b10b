// Ten training steps against an independent torch implementation of the same equations
// (tools/reference/gen_train_fixtures.py): Muon + AdamW, clipping, WSD, two micro-batches per step, and
// the Adam balancing controller.

#include <gtest/gtest.h>

#include "backend/ops.h"
#include "dist/communicator.h"
#include "dist/device_communicator.h"
#include "model/model_io.h"
#include "train/train_step.h"
#include "unit/reference_data.h"
#include "unit/test_util.h"
#include "unit/train_reference.h"

namespace zaya {
namespace {

TEST(TrainReference, TenStepsMatchTheTorchReference) {
  LoadedModel loaded = load_model(test::fixture("train/initial"));
  test::TrainReference ref;
  ZayaModel model(*loaded.params, cpu_ops());
  Optimizer optimizer(*loaded.params, test::TrainReference::optimizer_config(), cpu_ops());
  BalancingController balancing(test::TrainReference::balancing_config(), loaded.params->dims().layers,
                                loaded.params->dims().experts);
  const std::unique_ptr<Communicator> comm = make_single_process_communicator();
  const std::unique_ptr<DeviceCommunicator> collectives = make_host_device_communicator(*comm);
  const std::unique_ptr<TrainStep> step =
      test::one_process_train_step(model, optimizer, balancing, *collectives);
  TrainStep& train = *step;
  for (int64_t step = 0; step < ref.steps(); ++step) {
    const StepReport report = train.run(ref.batches(step), ref.lr_factor(step));
    ASSERT_FALSE(report.skipped);
    EXPECT_NEAR(report.loss, ref.loss(step), 1e-4) << "step " << step + 1;
    EXPECT_NEAR(report.optimizer.grad_norm, ref.grad_norm(step), 1e-3 * ref.grad_norm(step));
  }

  double worst = 0;
  std::string worst_name;
  for (const ParamInfo& param : loaded.params->table().params()) {
    const std::vector<float> want = ref.final_value(param.name);
    const float* got = loaded.params->value(param);
    const double error = test::relative_error(std::vector<float>(got, got + param.numel()), want);
    EXPECT_LE(error, 1e-4) << param.name;
    if (error > worst) worst = error, worst_name = param.name;
  }
  std::printf("worst relative parameter error after %lld steps: %.2e (%s)\n", (long long)ref.steps(), worst,
              worst_name.c_str());
}

}  // namespace
}  // namespace zaya
