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

OptimizerShards plan_optimizer_shards(const std::vector<ParamAssignment>& assignments, int64_t begin,
                                      int64_t end, int ranks) {
  std::vector<const ParamAssignment*> region;  // in layout order
  for (const ParamAssignment& a : assignments) {
    if (a.param->offset >= begin && a.param->offset < end) region.push_back(&a);
  }
  std::sort(region.begin(), region.end(), [](const ParamAssignment* x, const ParamAssignment* y) {
    return x->param->offset < y->param->offset;
  });
  double total_cost = 0;
  for (const ParamAssignment* a : region) total_cost += update_cost(*a);
  OptimizerShards shards;
  shards.bounds.push_back(begin);
  double done = 0;
  for (size_t i = 0; i < region.size() && int(shards.bounds.size()) < ranks; ++i) {
    const double cost = update_cost(*region[i]);
    const double target = total_cost * double(shards.bounds.size()) / double(ranks);
    // Cut before this parameter when that lands nearer the target than cutting after it.
    if (done + cost / 2 > target && region[i]->param->offset > shards.bounds.back()) {
      shards.bounds.push_back(region[i]->param->offset);
    }
    done += cost;
  }
  while (int(shards.bounds.size()) < ranks) shards.bounds.push_back(end);
  shards.bounds.push_back(end);
  return shards;
}

}  // namespace zaya
