#pragma once
// The torch reference's ten training steps (tools/reference/gen_train_fixtures.py): their batches, learning
// rate factors, losses, gradient norms and final weights, and the optimizer and balancing settings that
// produced them. Run on the CPU backend (train_reference_test.cpp) and on the GPU backend
// (gpu/model_test.cpp).

#include <cstdint>
#include <string>
#include <vector>

#include "model/zaya_model.h"
#include "optim/balancing.h"
#include "optim/optimizer.h"
#include "unit/reference_data.h"

namespace zaya::test {

class TrainReference {
 public:
  TrainReference();

  static OptimizerConfig optimizer_config();
  static BalancingConfig balancing_config();

  int64_t steps() const { return steps_; }
  // The micro-batches of a step (0-based); they point into this object.
  std::vector<Batch> batches(int64_t step);
  double lr_factor(int64_t step) const;
  double loss(int64_t step) const { return loss_[size_t(step)]; }
  double grad_norm(int64_t step) const { return grad_norm_[size_t(step)]; }
  std::vector<float> final_value(const std::string& name) const { return data_.floats("final." + name); }

 private:
  ReferenceData data_;
  int64_t steps_ = 0, micro_ = 0, batch_ = 0, seq_ = 0;
  std::vector<int32_t> windows_;  // [steps, micro, batch, seq + 1]
  std::vector<float> loss_, grad_norm_;
  std::vector<std::vector<int32_t>> ids_, labels_;  // the current step's, per micro-batch
};

}  // namespace zaya::test
