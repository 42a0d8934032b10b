#pragma once
// ZeRO-1: the optimizer state is split over the data-parallel ranks. A region of the flat parameter
// layout that a group of ranks holds alike (the dense parameters, held by every rank; the expert weights,
// held by the ranks with the same experts) is cut into one consecutive range per rank of the group, between
// parameters; each rank is the only one to keep the state of, and to update, the parameters in its range.
// A Muon matrix's Newton-Schulz runs once, on its owner, on the whole averaged gradient. The ranges are
// balanced by the update's arithmetic (Muon's Newton-Schulz dominates).

#include <cstdint>
#include <utility>
#include <vector>

#include "optim/param_groups.h"

namespace zaya {

struct OptimizerShards {
  std::vector<int64_t> bounds;  // [ranks + 1] float offsets; rank r owns [bounds[r], bounds[r + 1])
  int ranks() const { return int(bounds.size()) - 1; }
  int64_t begin(int rank) const { return bounds[size_t(rank)]; }
  int64_t end(int rank) const { return bounds[size_t(rank) + 1]; }
  std::pair<int64_t, int64_t> range(int rank) const { return {begin(rank), end(rank)}; }
  std::vector<int64_t> counts() const;  // [ranks] floats each rank owns
};

// The region [begin, end) of the layout over `ranks` ranks; the parameters that start in it are cut apart.
OptimizerShards plan_optimizer_shards(const std::vector<ParamAssignment>& assignments, int64_t begin,
                                      int64_t end, int ranks);

}  // namespace zaya
