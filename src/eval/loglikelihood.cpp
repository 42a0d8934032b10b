#include "eval/loglikelihood.h"

#include <algorithm>
#include <string>

#include "core/error.h"
#include "core/thread_governor.h"
#include "infer/token_logprobs.h"
#include "model/zaya_model.h"
#include "tokenizer/tokenizer.h"

namespace zaya {

LoglikelihoodRequest encode_pair(const Tokenizer& tokenizer, std::string_view context,
                                 std::string_view continuation, int32_t empty_context_token) {
  const size_t kept = context.find_last_not_of(" \t\n\r\f\v");
  const size_t trailing = kept == std::string_view::npos ? context.size() : context.size() - kept - 1;
  const std::string moved =
      std::string(context.substr(context.size() - trailing)) + std::string(continuation);
  context.remove_suffix(trailing);
  LoglikelihoodRequest request;
  if (context.empty()) {
    request.context = {empty_context_token};
    request.continuation = tokenizer.encode(moved);
    return request;
  }
  const std::vector<int32_t> whole = tokenizer.encode(std::string(context) + moved);
  request.context = tokenizer.encode(context);
  const size_t split = std::min(request.context.size(), whole.size());
  request.continuation.assign(whole.begin() + std::ptrdiff_t(split), whole.end());
  return request;
}

namespace {

// The model's input for a request: context + continuation without its last token, the last max_length.
std::vector<int32_t> model_input(const LoglikelihoodRequest& request, int64_t max_length) {
  std::vector<int32_t> all = request.context;
  all.insert(all.end(), request.continuation.begin(), request.continuation.end());
  all.pop_back();
  if (int64_t(all.size()) > max_length) all.erase(all.begin(), all.end() - max_length);
  return all;
}

}  // namespace

std::vector<LoglikelihoodResult> score_loglikelihoods(ZayaModel& model,
                                                      const std::vector<LoglikelihoodRequest>& requests,
                                                      int64_t max_length) {
  const int64_t vocab = model.params().dims().vocab;
  for (const LoglikelihoodRequest& request : requests) {
    if (request.context.empty()) throw Error("a scoring request needs at least one context token");
    if (int64_t(request.continuation.size()) > max_length) {
      throw Error(cat("a continuation of ", request.continuation.size(), " tokens is longer than the ",
                      max_length, " the model reads at once"));
    }
    for (const std::vector<int32_t>* part : {&request.context, &request.continuation}) {
      for (int32_t id : *part)
        if (id < 0 || id >= vocab) throw Error(cat("token id ", id, " is outside the vocabulary of ", vocab));
    }
  }
  // Longest first, so that a pass holds sequences of similar length (little padding); up to 4096 tokens a
  // pass, and logits of at most 256 MiB.
  std::vector<LoglikelihoodResult> results(requests.size(), LoglikelihoodResult{0.0, true});
  std::vector<size_t> order;
  std::vector<std::vector<int32_t>> inputs(requests.size());
  for (size_t r = 0; r < requests.size(); ++r) {
    if (requests[r].continuation.empty()) continue;  // log 1 = 0, greedy
    inputs[r] = model_input(requests[r], max_length);
    order.push_back(r);
  }
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return inputs[a].size() > inputs[b].size(); });
  const int64_t tokens_per_pass = std::clamp<int64_t>(kLogitsPerPass / vocab, 1, 4096);
  ThreadGovernor governor;  // a long scoring run shares its machine, as training does
  for (size_t first = 0; first < order.size();) {
    const int64_t seq = int64_t(inputs[order[first]].size());
    const size_t count = std::min(order.size() - first, size_t(std::max<int64_t>(1, tokens_per_pass / seq)));
    std::vector<int32_t> ids(count * size_t(seq), 0);
    for (size_t b = 0; b < count; ++b)
      std::copy(inputs[order[first + b]].begin(), inputs[order[first + b]].end(), ids.begin() + b * seq);
    const ForwardResult pass = model.forward({ids.data(), nullptr, nullptr, int64_t(count), seq}, true);
    const float* pass_logits = model.host_logits(pass.logits, int64_t(count) * seq);
    for (size_t b = 0; b < count; ++b) {
      const size_t r = order[first + b];
      const std::vector<int32_t>& continuation = requests[r].continuation;
      // The continuation's tokens are predicted by the input's last positions.
      const int64_t length = int64_t(inputs[r].size()), n = int64_t(continuation.size());
      LoglikelihoodResult& result = results[r];
      for (int64_t i = 0; i < n; ++i) {
        const float* logits = pass_logits + (int64_t(b) * seq + length - n + i) * vocab;
        const TokenLogprobs scored = token_logprobs(logits, vocab, continuation[size_t(i)], 0);
        result.loglikelihood += scored.token;
        result.greedy = result.greedy && scored.greedy;
      }
    }
    first += count;
    governor.after_step();
  }
  return results;
}

std::vector<LoglikelihoodRequest> rolling_windows(const std::vector<int32_t>& tokens, int64_t max_length,
                                                  int32_t prefix_token) {
  std::vector<LoglikelihoodRequest> windows;
  const size_t length = size_t(max_length), total = tokens.size();
  for (size_t predicted = 0, end = std::min(length, total); predicted < total;) {
    LoglikelihoodRequest window;
    if (predicted == 0) {
      window.context = {prefix_token};
    } else {
      // The window's input is the max_length tokens before its last: all of it not predicted is context.
      window.context.assign(tokens.begin() + std::ptrdiff_t(end - length - 1),
                            tokens.begin() + std::ptrdiff_t(predicted));
    }
    window.continuation.assign(tokens.begin() + std::ptrdiff_t(predicted),
                               tokens.begin() + std::ptrdiff_t(end));
    windows.push_back(std::move(window));
    predicted = end;
    end = std::min(total, end + length);
  }
  return windows;
}

}  // namespace zaya
