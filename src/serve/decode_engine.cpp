#include "serve/decode_engine.h"

#include <algorithm>

#include "core/error.h"
#include "core/rng.h"
#include "core/thread_governor.h"
#include "core/threads.h"
#include "model/zaya_model.h"

namespace zaya {

std::optional<SequenceEvent> Sequence::try_next_event() {
  std::lock_guard lock(mutex_);
  if (events_.empty()) return std::nullopt;
  SequenceEvent event = std::move(events_.front());
  events_.pop_front();
  return event;
}

void Sequence::post(SequenceEvent event) {
  {
    std::lock_guard lock(mutex_);
    events_.push_back(std::move(event));
  }
  if (on_event_) on_event_();
}

struct DecodeEngine::Running {
  std::shared_ptr<Sequence> sequence;
  DecodeCache cache;
  RandomStream rng;
  int64_t produced = 0;
  int32_t last = 0;  // the token to feed next
};

DecodeEngine::DecodeEngine(ZayaModel& model, EngineLimits limits) : model_(model), limits_(limits) {}

void warm_up(ZayaModel& model, const EngineLimits& limits, int64_t context) {
  constexpr int64_t kMostSequences = 8;
  const int64_t prompt_tokens = std::min<int64_t>(32, context - 1);  // and the decode step's token
  if (prompt_tokens < 1) return;
  const ModelDims& dims = model.params().dims();
  for (const int64_t count : {int64_t(1), std::min(limits.max_running, kMostSequences)}) {
    // [count, prompt_tokens] ids spread over the vocabulary, so that the tokens take many routes.
    std::vector<int32_t> ids(size_t(count * prompt_tokens));
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t((i * 104729 + 13) % uint64_t(dims.vocab));
    std::vector<DecodeCache> caches;
    std::vector<DecodeCache*> pointers;
    std::vector<const int32_t*> prompts;
    const std::vector<int64_t> lengths(size_t(count), prompt_tokens);
    for (int64_t b = 0; b < count; ++b)
      caches.push_back(make_decode_cache(dims, prompt_tokens + 1, model.ops().memory()));
    for (int64_t b = 0; b < count; ++b) {
      pointers.push_back(&caches[size_t(b)]);
      prompts.push_back(ids.data() + b * prompt_tokens);
    }
    model.prefill(prompts.data(), lengths.data(), pointers.data(), count, ZayaModel::PrefillLogits::Last);
    model.decode_batch(ids.data(), pointers.data(), count);
  }
}

void DecodeEngine::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  work_.notify_all();
}

bool DecodeEngine::submit(const std::vector<std::shared_ptr<Sequence>>& sequences) {
  {
    std::lock_guard lock(mutex_);
    if (int64_t(queue_.size() + sequences.size()) > limits_.max_queued) return false;
    queue_.insert(queue_.end(), sequences.begin(), sequences.end());
    counters_.queued = int64_t(queue_.size());
  }
  work_.notify_all();
  return true;
}

namespace {

SequenceEvent failed(std::string why) {
  SequenceEvent event;
  event.kind = SequenceEvent::Kind::Failed;
  event.error = std::move(why);
  return event;
}

SequenceEvent finished(std::string reason) {
  SequenceEvent event;
  event.kind = SequenceEvent::Kind::Finished;
  event.finish_reason = std::move(reason);
  return event;
}

// Ends a sequence that was cancelled or ran out of time; true when it did.
bool drop_if_over(Sequence& sequence, EngineCounters& counters) {
  if (sequence.cancelled()) return true;
  if (std::chrono::steady_clock::now() < sequence.request().deadline) return false;
  ++counters.timeouts;
  sequence.post(failed("the request ran out of time"));
  return true;
}

}  // namespace

void DecodeEngine::start(std::vector<Running>& joining, std::vector<Running>& running) {
  const int64_t vocab = model_.params().dims().vocab;
  // Groups prefilled in one pass each (the weights read once for all of them), within kLogitsPerPass.
  for (size_t first = 0; first < joining.size();) {
    size_t end = first;
    int64_t longest = 0;
    while (end < joining.size()) {
      const int64_t length = int64_t(joining[end].sequence->request().prompt.size());
      const int64_t wider = std::max(longest, length);
      if (end > first && int64_t(end - first + 1) * wider * vocab > kLogitsPerPass) break;
      longest = wider;
      ++end;
    }
    std::vector<const int32_t*> prompts;
    std::vector<int64_t> lengths;
    std::vector<DecodeCache*> caches;
    bool score = false;  // any prompt of the group scored: every position's logits, else each last one's
    for (size_t b = first; b < end; ++b) {
      prompts.push_back(joining[b].sequence->request().prompt.data());
      lengths.push_back(int64_t(joining[b].sequence->request().prompt.size()));
      caches.push_back(&joining[b].cache);
      score = score || joining[b].sequence->request().score_prompt;
    }
    const float* logits = nullptr;
    try {
      logits = model_.prefill(prompts.data(), lengths.data(), caches.data(), int64_t(caches.size()),
                              score ? ZayaModel::PrefillLogits::Every : ZayaModel::PrefillLogits::Last);
    } catch (const std::exception& e) {
      for (size_t b = first; b < end; ++b) joining[b].sequence->post(failed(e.what()));
      first = end;
      continue;
    }
    ++counters_.prefills;
    for (size_t b = first; b < end; ++b) {
      Running& joined = joining[b];
      const SequenceRequest& request = joined.sequence->request();
      const int64_t length = lengths[b - first];
      const float* rows = logits + int64_t(b - first) * (score ? longest : 1) * vocab;
      counters_.prompt_tokens += length;
      if (request.score_prompt) {
        SequenceEvent scored;
        scored.kind = SequenceEvent::Kind::PromptScored;
        scored.prompt.resize(size_t(length - 1));
        // Each position's log-softmax reads a whole row of logits (~35 us at 32768 tokens): on all threads.
        parallel_for_rethrowing(length - 1, [&](int64_t i) {
          scored.prompt[size_t(i)] = token_logprobs(rows + i * vocab, vocab, request.prompt[size_t(i + 1)],
                                                    request.logprobs.value_or(0));
        });
        joined.sequence->post(std::move(scored));
      }
      if (request.max_tokens == 0) {
        joined.sequence->post(finished("length"));
      } else if (advance(joined, choose(joined, score ? rows + (length - 1) * vocab : rows))) {
        running.push_back(std::move(joined));
      }
    }
    first = end;
  }
}

SequenceEvent DecodeEngine::choose(const Running& running, const float* logits) const {
  const SequenceRequest& request = running.sequence->request();
  const int64_t vocab = model_.params().dims().vocab;
  SequenceEvent event;
  event.token =
      sample_token(logits, vocab, request.rule, running.rng.uniform_double(uint64_t(running.produced)));
  if (request.logprobs) event.logprobs = token_logprobs(logits, vocab, event.token, *request.logprobs);
  return event;
}

bool DecodeEngine::advance(Running& running, const SequenceEvent& event) {
  const SequenceRequest& request = running.sequence->request();
  running.sequence->post(event);
  ++running.produced;
  ++counters_.generated_tokens;
  running.last = event.token;
  if (request.stop_token && event.token == *request.stop_token) {
    running.sequence->post(finished("stop"));
    return false;
  }
  if (running.produced == request.max_tokens) {
    running.sequence->post(finished("length"));
    return false;
  }
  return true;
}

void DecodeEngine::run() {
  std::vector<Running> running;
  // A server shares its machine: beside a busy process, medium decoded 2.2x slower on both cores than on
  // one (bf16, bench/serve_busy_neighbour.sh). Waits for requests are left out of the governor's windows.
  ThreadGovernor governor;
  for (;;) {
    governor.after_step();  // the previous pass's prefills and decode step
    std::vector<std::shared_ptr<Sequence>> joining;
    {
      std::unique_lock lock(mutex_);
      if (!stopping_ && queue_.empty() && running.empty()) {
        governor.pause();
        work_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        governor.resume();
      }
      if (stopping_) {
        for (Running& r : running) r.sequence->post(failed("the server is shutting down"));
        for (std::shared_ptr<Sequence>& sequence : queue_)
          sequence->post(failed("the server is shutting down"));
        return;
      }
      while (!queue_.empty() && int64_t(running.size() + joining.size()) < limits_.max_running) {
        joining.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
      counters_.queued = int64_t(queue_.size());
    }
    std::vector<Running> starting;
    for (std::shared_ptr<Sequence>& sequence : joining) {
      if (drop_if_over(*sequence, counters_)) continue;
      const SequenceRequest& request = sequence->request();
      starting.push_back(
          {sequence,
           make_decode_cache(model_.params().dims(), int64_t(request.prompt.size()) + request.max_tokens,
                             model_.ops().memory()),
           RandomStream(request.seed, RngPurpose::Sampling, 0)});
    }
    start(starting, running);
    running.erase(std::remove_if(running.begin(), running.end(),
                                 [&](Running& r) { return drop_if_over(*r.sequence, counters_); }),
                  running.end());
    counters_.running = int64_t(running.size());
    if (running.empty()) continue;

    std::vector<int32_t> tokens;
    std::vector<DecodeCache*> caches;
    for (Running& r : running) {
      tokens.push_back(r.last);
      caches.push_back(&r.cache);
    }
    try {
      const float* logits = model_.decode_batch(tokens.data(), caches.data(), int64_t(running.size()));
      ++counters_.decode_steps;
      const int64_t vocab = model_.params().dims().vocab;
      // Each sequence's choice reads its whole row of logits (35-80 us at 32768 tokens): on all threads,
      // then posted in order.
      std::vector<SequenceEvent> chosen(running.size());
      parallel_for_rethrowing(int64_t(running.size()), [&](int64_t i) {
        chosen[size_t(i)] = choose(running[size_t(i)], logits + i * vocab);
      });
      std::vector<Running> still;
      for (size_t i = 0; i < running.size(); ++i) {
        if (advance(running[i], chosen[i])) still.push_back(std::move(running[i]));
      }
      running = std::move(still);
    } catch (const std::exception& e) {
      for (Running& r : running) r.sequence->post(failed(e.what()));
      running.clear();
    }
    counters_.running = int64_t(running.size());
  }
}

}  // namespace zaya
