#include "optim/optimizer_shards.h"

#include <algorithm>
#include <cmath>

namespace zaya {
namespace {

// Floating-point operations of one update, roughly: Newton-Schulz's five iterations cost about 30 x
// numel x min(rows, cols) for each matrix; AdamW about 10 per element.
double update_cost(const ParamAssignment& a) {
  const double numel = double(a.param->numel());
  if (a.optimizer != OptimizerKind::Muon) return 10 * numel;
  const Shape& shape = a.param->shape;
  const int64_t rows = shape[shape.rank() - 2], cols = shape[shape.rank() - 1];
  return 30 * numel * double(std::min(rows, cols));
}

}  // namespace

std::vector<int64_t> OptimizerShards::counts() const {
  std::vector<int64_t> out;
  for (int r = 0; r < ranks(); ++r) out.push_back(end(r) - begin(r));
  return out;
}

OptimizerShards plan_optimizer_shards(const std::vector<ParamAssignment>& assignments, int64_t total_floats,
                                      int ranks) {
  double total_cost = 0;
  for (const ParamAssignment& a : assignments) total_cost += update_cost(a);
  OptimizerShards shards;
  shards.bounds.push_back(0);
  double done = 0;
  for (size_t i = 0; i < assignments.size() && int(shards.bounds.size()) < ranks; ++i) {
    const double cost = update_cost(assignments[i]);
    const double target = total_cost * double(shards.bounds.size()) / double(ranks);
    // Cut before this parameter when that lands nearer the target than cutting after it.
    if (done + cost / 2 > target && assignments[i].param->offset > shards.bounds.back()) {
      shards.bounds.push_back(assignments[i].param->offset);
    }
    done += cost;
  }
  while (int(shards.bounds.size()) < ranks) shards.bounds.push_back(total_floats);
  shards.bounds.push_back(total_floats);
  return shards;
}

}  // namespace zaya
