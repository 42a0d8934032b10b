#include "train/evaluator.h"

#include <algorithm>
#include <cmath>

#include "data/loader.h"
#include "dist/communicator.h"
#include "model/zaya_model.h"
#include "tokenizer/tokenizer.h"
#include "train/batch_prefetcher.h"

namespace zaya {

Evaluator::Evaluator(const TrainConfig& config, int64_t vocab, const Tokenizer& tokenizer, Communicator& comm,
                     bool lockstep)
    : config_(config), tokenizer_(tokenizer), comm_(comm), lockstep_(lockstep) {
  std::vector<StageData> stages;
  for (const StageConfig& stage : config.stages)
    stages.push_back({stage.seq_len, {{config.data.validation, 1.0}}});
  loader_ = std::make_unique<DataLoader>(stages, config.run.seed ^ 0xe7a1u, vocab);
  bytes_.assign(config.stages.size(), 0);
}

Evaluator::~Evaluator() = default;

EvalMetrics Evaluator::run(ZayaModel& model, int64_t stage) {
  loader_->start_stage(stage);
  const int64_t seq = loader_->seq_len(), micro = config_.eval.micro_batch;
  const int64_t windows = std::max<int64_t>(1, (config_.eval.tokens + seq - 1) / seq);
  const Share share = even_share(windows, comm_.size(), comm_.rank());
  const int64_t mine = share.count;
  std::vector<int32_t> data(size_t(mine * (seq + 1))), ids, labels;
  loader_->next(windows, share.first, mine, data.data());
  split_windows(data, mine, seq, 0, 1, ids, labels);
  double loss = 0;
  int64_t labelled = 0, bytes = 0;
  const bool count_bytes = bytes_[size_t(stage)] == 0;
  for (int64_t w = 0; w < mine && count_bytes; ++w) {
    const int32_t* targets = labels.data() + w * seq;
    bytes += int64_t(tokenizer_.decode(std::vector<int32_t>(targets, targets + seq)).size());
  }
  const int64_t busiest = (windows + comm_.size() - 1) / comm_.size();
  const int64_t passes = ((lockstep_ ? busiest : mine) + micro - 1) / micro;
  for (int64_t pass = 0, first = 0; pass < passes; ++pass, first += micro) {
    const int32_t padding_id = 0, padding_label = kIgnoreLabel;
    const int64_t n = std::min(micro, mine - first);
    const ForwardResult result =
        n > 0 ? model.forward({ids.data() + first * seq, labels.data() + first * seq, nullptr, n, seq})
              : model.forward({&padding_id, &padding_label, nullptr, 1, 1});
    loss += result.loss_sum;
    labelled += result.labelled;
  }
  int64_t counts[2] = {labelled, bytes};
  comm_.all_reduce_sum(counts, 2);
  comm_.all_reduce_sum(&loss, 1);
  labelled = counts[0];
  if (count_bytes) bytes_[size_t(stage)] = counts[1];
  EvalMetrics m;
  m.eval_tokens = labelled;
  m.loss = loss / double(labelled);
  m.perplexity = std::exp(m.loss);
  m.bits_per_byte = loss / std::log(2.0) / double(std::max<int64_t>(1, bytes_[size_t(stage)]));
  return m;
}

}  // namespace zaya
