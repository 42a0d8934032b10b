#pragma once
// ZeRO-1: the optimizer state is split over the data-parallel ranks. Each rank owns one consecutive range
// of the flat parameter layout, cut between parameters, and is the only one to keep the state of, and to
// update, the parameters in it; a Muon matrix's Newton-Schulz runs once, on its owner, on the whole
// averaged gradient. The ranges are balanced by the update's arithmetic (Muon's Newton-Schulz dominates).

#include <cstdint>
#include <vector>

#include "optim/param_groups.h"

namespace zaya {

struct OptimizerShards {
  std::vector<int64_t> bounds;  // [ranks + 1] float offsets; rank r owns [bounds[r], bounds[r + 1])
  int ranks() const { return int(bounds.size()) - 1; }
  int64_t begin(int rank) const { return bounds[size_t(rank)]; }
  int64_t end(int rank) const { return bounds[size_t(rank) + 1]; }
  std::vector<int64_t> counts() const;  // [ranks] floats each rank owns
};

OptimizerShards plan_optimizer_shards(const std::vector<ParamAssignment>& assignments, int64_t total_floats,
                                      int ranks);

}  // namespace zaya
