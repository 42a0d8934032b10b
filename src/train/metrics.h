#pragma once
// Where a run reports: RUN/metrics.jsonl (one JSON record per logged step, evaluation and event),
// TensorBoard event files under RUN/tb/, and the console: one live line on a terminal, plain periodic
// lines without control characters elsewhere.

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "train/train_step.h"

namespace zaya {

class TensorBoardWriter;

struct StepMetrics {
  int64_t step = 0, tokens = 0, total_tokens = 0;
  int64_t stage = 0, stages = 0;
  std::string stage_name;
  double loss = 0, aux_loss = 0, lr = 0, grad_norm = 0, clip = 1;
  double tokens_per_second = 0, mfu = 0, eta_seconds = 0;
  double step_seconds = 0, communication_seconds = 0;  // the step, and its collectives on rank 0
  double gradient_seconds = 0;                         // of which the gradient reduction's
  double context_seconds = 0;                          // and context parallelism's exchanges
  int64_t communication_bytes = 0;                     // rank 0's payload to the collectives
  int64_t sequences = 0, seq_len = 0, ranks = 1;
  bool skipped = false;
  std::vector<RoutingMetrics> routing;
};

struct EvalMetrics {
  int64_t step = 0, tokens = 0, eval_tokens = 0;
  double loss = 0, perplexity = 0, bits_per_byte = 0;
};

class MetricsLog {
 public:
  MetricsLog(const std::string& run_dir, bool tensorboard);
  ~MetricsLog();
  void step(const StepMetrics& m);
  void eval(const EvalMetrics& m);
  // Anything else worth a record: a stage change, a skipped step, a checkpoint, a sample. `fields` is a
  // JSON object's text.
  void event(const std::string& type, int64_t step, const std::string& fields_json);
  void flush();

 private:
  std::FILE* jsonl_ = nullptr;
  std::unique_ptr<TensorBoardWriter> tensorboard_;
};

class ConsoleProgress {
 public:
  // live: a live line when stdout is a terminal (MPI launchers give ranks pseudo-terminals whose output
  // is interleaved, so they pass false).
  ConsoleProgress(double seconds_between_lines, bool live);
  void step(const StepMetrics& m);      // a live line on a terminal, a plain line every so often elsewhere
  void print(const std::string& line);  // a line of its own (evaluations, stages, samples, warnings)
  void finish();                        // ends the live line

 private:
  bool terminal_;
  double period_;
  std::chrono::steady_clock::time_point last_line_;
  bool live_ = false;
};

std::string format_duration(double seconds);  // "1h02m", "3m05s", "42s"

}  // namespace zaya
