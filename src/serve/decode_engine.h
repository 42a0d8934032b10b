#pragma once
// Continuous batching for zaya serve: one thread owns the model and advances every running sequence by one
// token per step, all of them in one decode_batch; new sequences join between steps (after a prefill of
// their prompts), and a finished or cancelled one leaves, so requests never wait for each other to end.
// The HTTP side submits sequences and reads their events; the engine never blocks on it.
//
// The engine runs on the thread that calls run(), which should be the one that loaded the model: OpenMP
// keeps a pool of worker threads per thread that ran a parallel region, and a second pool (a loop on a new
// thread) leaves more OpenMP threads than cores, whereupon libgomp puts its workers to sleep after every
// region and wakes them through the kernel for the next (measured: 3.4x slower decoding on 2 cores).

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "infer/generator.h"
#include "infer/token_logprobs.h"

namespace zaya {

class ZayaModel;

// What a sequence reports, in order: (with score_prompt) its prompt's log-probabilities, then each token,
// then one end (finished or failed).
struct SequenceEvent {
  enum class Kind { PromptScored, Token, Finished, Failed } kind = Kind::Token;
  int32_t token = 0;
  TokenLogprobs logprobs;             // Token: of the token, with the alternatives asked for
  std::vector<TokenLogprobs> prompt;  // PromptScored: of prompt tokens 1..n-1
  std::string finish_reason;          // Finished: "length" or "stop" (the end-of-text token)
  std::string error;                  // Failed: why
};

struct SequenceRequest {
  std::vector<int32_t> prompt;  // at least one token
  int64_t max_tokens = 16;      // may be 0: the prompt is only scored
  SamplingRule rule;
  uint64_t seed = 0;
  // Each token's log-probability with this many alternatives; none: tokens are not scored (a log-sum-exp over
  // the vocabulary per token saved).
  std::optional<int64_t> logprobs;
  bool score_prompt = false;
  std::optional<int32_t> stop_token;
  std::chrono::steady_clock::time_point deadline;
};

// One sequence's mailbox between the engine and the request side that reads it.
class Sequence {
 public:
  // on_event, when given, runs on the engine's thread after each event is posted (outside the mailbox's
  // lock): it tells a reader that waits on something else (an event loop) to look.
  explicit Sequence(SequenceRequest request, std::function<void()> on_event = {})
      : request_(std::move(request)), on_event_(std::move(on_event)) {}
  const SequenceRequest& request() const { return request_; }

  // Request side: the next event if one is waiting.
  std::optional<SequenceEvent> try_next_event();
  // Request side: the client left, or the text reached a stop string; the engine drops it before its next
  // step.
  void cancel() { cancelled_ = true; }
  bool cancelled() const { return cancelled_; }

  // Engine side.
  void post(SequenceEvent event);

 private:
  SequenceRequest request_;
  std::function<void()> on_event_;
  std::atomic<bool> cancelled_{false};
  std::mutex mutex_;
  std::deque<SequenceEvent> events_;
};

struct EngineLimits {
  int64_t max_running = 8;  // sequences decoded together
  int64_t max_queued = 64;  // sequences waiting for a place
};

// Counters for /metrics, read without a lock.
struct EngineCounters {
  std::atomic<int64_t> prompt_tokens{0}, generated_tokens{0}, decode_steps{0}, prefills{0}, timeouts{0};
  std::atomic<int64_t> running{0}, queued{0};
};

// Runs once, before the first request, what the first requests would: a prefill of one short prompt and one
// of up to 8 together, each followed by a decode step, all within the model's context (tokens). The first
// pass of a shape creates its products' oneDNN primitives and grows the arenas: 8 requests arriving together
// after a start waited 786 ms for their first token, the next 8 146-168 ms (medium, bf16, 2 threads). On the
// thread that will run the engine.
void warm_up(ZayaModel& model, const EngineLimits& limits, int64_t context);

class DecodeEngine {
 public:
  DecodeEngine(ZayaModel& model, EngineLimits limits);

  // Decodes until stop(), on the calling thread; sequences still running or queued then get Failed.
  void run();
  // From any thread, before or during run().
  void stop();

  // Queues sequences (all or none); false when the queue has no room for them.
  bool submit(const std::vector<std::shared_ptr<Sequence>>& sequences);
  const EngineCounters& counters() const { return counters_; }
  const EngineLimits& limits() const { return limits_; }

 private:
  struct Running;
  // The prefill of new sequences (several in one pass) and their first tokens; those that go on join
  // `running`.
  void start(std::vector<Running>& joining, std::vector<Running>& running);
  // The next token sampled from logits [vocab] (with its logprobs when asked): reads only `running`.
  SequenceEvent choose(const Running& running, const float* logits) const;
  // Posts the chosen token; false when the sequence ended.
  bool advance(Running& running, const SequenceEvent& event);

  ZayaModel& model_;
  const EngineLimits limits_;
  EngineCounters counters_;
  std::mutex mutex_;
  std::condition_variable work_;
  std::deque<std::shared_ptr<Sequence>> queue_;
  bool stopping_ = false;
};

}  // namespace zaya
