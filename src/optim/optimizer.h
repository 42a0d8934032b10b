#pragma once
// Muon for the hidden matrices and AdamW for the rest, over the parameter store: clipping by the global
// gradient norm, then one update per parameter from its group's rule. Each expert's gate_up_proj[e] and
// down_proj[e] is its own matrix for Muon; a layer's experts are orthogonalised as one batch. Under data
// parallelism an optimizer owns ranges of the parameters (optim/optimizer_shards.h: one of the dense
// parameters, one of the expert weights): it keeps state for, and updates, only the parameters in them.

#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "core/buffer.h"
#include "core/precision.h"
#include "optim/param_groups.h"

namespace zaya {

class Ops;

struct MuonConfig {
  float momentum = 0.95f;
  bool nesterov = true;
  int ns_steps = 5;
  float ns_coefficients[3] = {3.4445f, -4.7750f, 2.0315f};  // the quintic of Jordan et al.
  float rms_scale = 0.2f;  // update *= rms_scale * sqrt(max(rows, cols)): AdamW's RMS (Moonlight)
  float lr_multiplier = 1.0f;
};

struct AdamWConfig {
  float beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f;
  float lr_multiplier = 1.0f;
};

struct OptimizerConfig {
  float lr = 3e-3f;           // base rate, before schedule, batch scaling and multipliers
  float weight_decay = 0.1f;  // decoupled; only for parameters whose rule says so
  float grad_clip = 1.0f;     // global L2 norm; 0 turns clipping off
  MuonConfig muon;
  AdamWConfig adamw;
  std::vector<GroupRule> groups = default_group_rules();
};

struct OptimizerStepStats {
  double grad_norm = 0;  // before clipping
  float clip_factor = 1;
  bool finite = true;  // false: a NaN or Inf gradient; nothing was updated
  double adamw_seconds = 0, muon_seconds = 0;
};

class Optimizer {
 public:
  // Throws Error naming optimizer.* fields when the rules do not fit the model. `owned`: the float ranges
  // [begin, end) of the parameter layout this optimizer updates (cut between parameters); none: all of it.
  // `precision`: of Muon's Newton-Schulz products (the run's precision; see docs/TRAINING.md).
  Optimizer(ParameterStore& params, const OptimizerConfig& config, Ops& ops,
            std::vector<std::pair<int64_t, int64_t>> owned = {}, Precision precision = Precision::F32);

  // One update of the owned parameters from the gradients accumulated in the store, at lr = config.lr *
  // lr_factor (x multipliers). grad_norm: the L2 norm of the whole model's gradient (for clipping); the
  // one-argument form computes it from the store, which is right when this optimizer owns everything.
  OptimizerStepStats step(double lr_factor, double grad_norm);
  OptimizerStepStats step(double lr_factor);
  // The sum of squares of the owned parameters' gradients: its sum over ranks is the squared norm.
  // One read of a device value.
  double owned_grad_sum_squares();

  const std::vector<ParamAssignment>& assignments() const { return assignments_; }
  bool owns(const ParamInfo& param) const { return state_index(param.offset) >= 0; }
  int64_t steps_taken() const { return steps_; }
  void set_steps_taken(int64_t steps) { steps_ = steps; }
  // An owned parameter's state, shaped like it: AdamW's first moment or Muon's momentum, and AdamW's
  // second moment (nullptr for Muon's parameters, which have none). For checkpoints.
  float* first_moment(const ParamInfo& param) { return m_.as<float>() + state_index(param.offset); }
  float* second_moment(const ParamInfo& param);
  // The floats of state this optimizer holds: momentum for every owned parameter, a second moment for the
  // owned AdamW ones.
  int64_t state_floats() const { return owned_floats_ + second_moment_floats_; }
  int64_t second_moment_floats() const { return second_moment_floats_; }

 private:
  // One Muon parameter: `count` matrices [rows, cols] one after the other (a layer's experts, or one).
  struct MatrixBatch {
    const ParamAssignment* assignment;
    int64_t offset;  // into the flat buffers
    int64_t count, rows, cols;
  };
  void muon_update(const MatrixBatch& batch, float lr, float grad_scale);
  // Where the state of the float at `offset` of the layout is kept (the owned ranges' states one after
  // the other), or -1 when no owned range holds it.
  int64_t state_index(int64_t offset) const;

  ParameterStore& params_;
  OptimizerConfig config_;
  Ops& ops_;
  Precision precision_;
  std::vector<ParamAssignment> assignments_;
  std::vector<std::pair<int64_t, int64_t>> owned_;  // float ranges of the parameter layout
  int64_t owned_floats_ = 0;                        // their total length
  std::vector<MatrixBatch> batches_;                // Muon's units of work, owned ones only
  // Where each owned AdamW parameter's second moment starts in v_, by the parameter's offset.
  std::map<int64_t, int64_t> second_moment_index_;
  int64_t second_moment_floats_ = 0;
  AlignedBuffer m_;                 // [owned_floats_]: AdamW's first moment or Muon's momentum
  AlignedBuffer v_;                 // [second_moment_floats_]: AdamW's second moment
  AlignedBuffer update_;            // [the largest batch's floats]: the update being orthogonalised
  AlignedBuffer grad_sum_squares_;  // [1] double: the sum owned_grad_sum_squares takes on the device
  int64_t steps_ = 0;
};

}  // namespace zaya
