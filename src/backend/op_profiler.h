#pragma once
// Where a step's time goes, op by op: a profiler stands in front of a backend and times every call to it
// (`zaya bench step --profile`). It waits for the device before and after each call, so an op's time is
// its own and not the queue's; the profiled step is therefore slower than a plain one (a GPU's launch
// latency is paid once per op instead of hidden), and the time outside the ops is what the host spends
// between them.

#include <memory>
#include <string>
#include <vector>

namespace zaya {

class Ops;

// One row of a profile: an op (a matrix product by its precision, transposes and m x n x k: "gemm bf16
// A B^T 8192x1024x2048"; an expert's products get a row per token count), its calls, their time and, for
// products, their FLOPs.
struct OpTime {
  std::string name;
  int64_t calls = 0;
  double seconds = 0;
  double flops = 0;  // 2 m n k summed; 0 for the other ops
};

class OpProfiler {
 public:
  explicit OpProfiler(Ops& inner);
  ~OpProfiler();
  OpProfiler(const OpProfiler&) = delete;
  OpProfiler& operator=(const OpProfiler&) = delete;

  // The backend to hand to the model: every call is timed, then forwarded to `inner`.
  Ops& ops();
  // The rows so far, the slowest first.
  std::vector<OpTime> times() const;
  // Starts the rows afresh (after a warm-up that sized the caller's buffers).
  void clear();

 private:
  class TimingOps;
  std::unique_ptr<TimingOps> timing_;
};

}  // namespace zaya
