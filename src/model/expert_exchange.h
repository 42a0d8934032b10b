#pragma once
// What one layer's expert-parallel forward pass keeps for its backward pass, on the experts' side. M = the
// rows this rank received: for each source rank of the group in order, for each of this rank's experts in
// order, the rows that source routed to that expert.

#include <cstdint>
#include <vector>

#include "backend/ops.h"

namespace zaya {

struct ExpertExchange {
  std::vector<int64_t> table;       // [P, E] rows each group rank routed to each expert
  std::vector<int64_t> send, recv;  // [P] floats (rows x H) sent to and received from each rank
  int64_t received = 0;             // M
  // In the activation arena (the backend's memory), until the next forward pass.
  float* x = nullptr;        // [M, H] received rows
  float* gate_up = nullptr;  // [M, 2I]
  Destination act;           // [M, I] (bf16 in bf16 runs)
};

}  // namespace zaya
