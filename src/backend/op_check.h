#pragma once
// Every op of the backend table (op_table.h) run on two backends from the same random inputs at one model's
// shapes: how far the second backend's outputs are from the reference's (the CPU's), and the time each
// takes. `zaya bench ops` prints it; the GPU tests hold the emulated GPU backend to bounds with it. It is
// the op-by-op check docs/ARCHITECTURE.md ("Principles") asks of every backend, runnable wherever that
// backend's hardware is.

#include <cstdint>
#include <string>
#include <vector>

#include "core/precision.h"

namespace zaya {

class Ops;

// The sizes the ops take in a model: the backend's own copy of them (the backend layer does not see the
// model's ModelDims; model/model_dims.h's op_check_shape() makes one from it).
struct OpCheckShape {
  int64_t batch = 0, seq = 0;  // the micro-batch: tokens T = batch * seq
  int64_t hidden = 0, heads = 0, kv_heads = 0, head_dim = 0;
  int64_t conv_time0 = 0, conv_time1 = 0;  // the CCA convolutions' kernels
  int64_t rotary_dim = 0;                  // channels of a head that get RoPE
  double rope_theta = 10000.0;
  int64_t window = 0;  // a sliding-window layer's window (its attention is checked too), 0: none
  int64_t router = 0, experts = 0, intermediate = 0, vocab = 0;
  int64_t loss_rows = 0;  // rows of logits the head scores at once (the model's passes over the vocabulary)
  float rms_eps = 1e-5f;
  int32_t pad_token_id = -1;  // the embedding's skipped row, -1: none
  int64_t tokens() const { return batch * seq; }
};

struct OpCheckOptions {
  Precision precision = Precision::F32;  // of the products, the attention, Newton-Schulz, the loss gradient
  int repeats = 5;                       // timed runs of each op on each backend, after the compared one
  uint64_t seed = 0;                     // of the random inputs
  // The OpenMP threads each side's compared run has (0: as they are). The CPU against itself at two counts
  // checks that no op's bits follow the thread count (every error must be 0).
  int reference_threads = 0, device_threads = 0;
};

// One call of one op. Errors are over every output the op writes (integers compared as numbers, so a
// different choice or order shows as an error of at least 1).
struct OpCheckResult {
  std::string op;            // the Ops member
  std::string call;          // which use of it and its shape: "experts' x W^T [256,64] x [128,64]^T"
  double abs_error = 0;      // the largest |device - reference| over the outputs
  double rel_error = 0;      // the largest over the outputs of (largest |device - reference|) / (largest
                             // |reference|): each output against its own scale; infinite where a NaN or
                             // an infinity is not matched
  std::string worst_output;  // the output of the largest relative error
  double reference_seconds = 0, device_seconds = 0;  // medians of the timed runs, synchronised around each
};

// Runs every op of the table (kOpNames, ops.h) at least once on `reference` and on `device` (which may be the
// same backend: then every error is 0) and compares them. Inputs are valid for each op: choices in range,
// orders that group them, labels with ignored rows, a key mask with padded keys, the saved values of a
// forward pass (made by the reference's forward) for each backward. Throws Error naming the op where a
// backend does, or where an op of the table has no call here.
std::vector<OpCheckResult> check_ops(const OpCheckShape& shape, Ops& reference, Ops& device,
                                     const OpCheckOptions& options = {});

}  // namespace zaya
