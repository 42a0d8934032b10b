#include "data/loader.h"

#include <algorithm>
#include <numeric>

#include "core/error.h"
#include "core/rng.h"

namespace zaya {

// One dataset's windows at one sequence length. Epoch e reads the documents in a shuffled order and its
// windows in a permuted order, both keyed by (seed, stream, e).
class DataLoader::Stream {
 public:
  Stream(std::shared_ptr<IndexedDataset> data, int64_t seq_len, uint64_t seed, uint64_t stream,
         int64_t vocab_limit)
      : data_(std::move(data)), seq_len_(seq_len), seed_(seed), stream_(stream), vocab_limit_(vocab_limit) {
    const int64_t documents = data_->document_count();
    document_tokens_.resize(size_t(documents));
    for (int64_t d = 0; d < documents; ++d) {
      for (int64_t s = data_->document_start(d); s < data_->document_start(d + 1); ++s) {
        document_tokens_[size_t(d)] += data_->sequence_length(s);
      }
    }
    windows_ = (data_->total_tokens() - 1) / seq_len_;
    if (windows_ <= 0) {
      throw Error(cat("has ", data_->total_tokens(),
                      " tokens, too few for one window of seq_len + 1 = ", seq_len_ + 1))
          .file(data_->prefix() + ".bin");
    }
  }

  // The sample-th window this stream yields (epochs follow one another).
  void window(int64_t sample, int32_t* out) {
    const int64_t epoch = sample / windows_;
    if (epoch != epoch_) prepare_epoch(epoch);
    const Permutation order(uint64_t(windows_), seed_, stream_ ^ (uint64_t(epoch) << 32));
    int64_t offset = int64_t(order(uint64_t(sample % windows_))) * seq_len_;
    // The document (in this epoch's order) that holds the window's first token.
    size_t position = size_t(std::upper_bound(starts_.begin(), starts_.end(), offset) - starts_.begin()) - 1;
    offset -= starts_[position];
    int64_t needed = seq_len_ + 1;
    while (needed > 0) {
      const int64_t document = order_[position];
      for (int64_t s = data_->document_start(document); s < data_->document_start(document + 1) && needed > 0;
           ++s) {
        const int64_t length = data_->sequence_length(s);
        if (offset >= length) {
          offset -= length;
          continue;
        }
        const int64_t take = std::min(needed, length - offset);
        data_->read(s, offset, take, out, vocab_limit_);
        out += take;
        needed -= take;
        offset = 0;
      }
      position = (position + 1) % order_.size();
    }
  }

 private:
  void prepare_epoch(int64_t epoch) {
    const size_t documents = document_tokens_.size();
    order_.resize(documents);
    std::iota(order_.begin(), order_.end(), int64_t(0));
    const RandomStream rng(seed_, RngPurpose::DataOrder,
                           stream_ ^ (uint64_t(epoch) << 32) ^ (uint64_t(1) << 63));
    for (size_t i = documents; i > 1; --i) {  // Fisher-Yates
      const size_t j = size_t(rng.uniform_double(i) * double(i));
      std::swap(order_[i - 1], order_[std::min(j, i - 1)]);
    }
    starts_.assign(documents + 1, 0);
    for (size_t i = 0; i < documents; ++i) starts_[i + 1] = starts_[i] + document_tokens_[size_t(order_[i])];
    epoch_ = epoch;
  }

  std::shared_ptr<IndexedDataset> data_;
  int64_t seq_len_;
  uint64_t seed_, stream_;
  int64_t vocab_limit_;
  std::vector<int64_t> document_tokens_;  // [documents]
  int64_t windows_ = 0;                   // per epoch
  int64_t epoch_ = -1;
  std::vector<int64_t> order_;   // this epoch's document order
  std::vector<int64_t> starts_;  // [documents + 1] first token of each, in that order
};

DataLoader::DataLoader(std::vector<StageData> stages, uint64_t seed, int64_t vocab_limit)
    : stages_(std::move(stages)), seed_(seed), vocab_limit_(vocab_limit) {
  if (stages_.empty()) throw Error("no stages").field("stages");
  for (size_t s = 0; s < stages_.size(); ++s) {
    const StageData& stage = stages_[s];
    const std::string field = cat("stages[", s, "]");
    if (stage.seq_len <= 0) throw Error("must be positive").field(field + ".seq_len");
    if (stage.mixture.empty()) throw Error("no datasets").field(field + ".mixture");
    double total = 0;
    for (const MixtureEntry& entry : stage.mixture) {
      if (!(entry.weight > 0))
        throw Error("weight must be positive").field(field + ".mixture." + entry.prefix);
      total += entry.weight;
    }
    weights_.emplace_back();
    streams_.emplace_back();
    for (size_t e = 0; e < stage.mixture.size(); ++e) {
      const MixtureEntry& entry = stage.mixture[e];
      std::shared_ptr<IndexedDataset>& data = datasets_[entry.prefix];
      if (!data) data = std::make_shared<IndexedDataset>(entry.prefix);
      weights_.back().push_back(entry.weight / total);
      streams_.back().push_back(
          std::make_unique<Stream>(data, stage.seq_len, seed, (uint64_t(s) << 16) | e, vocab_limit));
    }
  }
  start_stage(0);
}

DataLoader::~DataLoader() = default;

void DataLoader::start_stage(int64_t stage) {
  if (stage < 0 || stage >= int64_t(stages_.size())) throw Error(cat("no stage ", stage));
  state_ = {stage, 0, std::vector<int64_t>(stages_[size_t(stage)].mixture.size(), 0)};
}

// Deterministic weighted interleaving: each sample goes to the entry furthest behind its share, so after n
// samples every entry has drawn within one sample of weight * n.
int64_t DataLoader::choose_entry() {
  const std::vector<double>& weights = weights_[size_t(state_.stage)];
  int64_t best = 0;
  double best_gap = -1e300;
  for (size_t e = 0; e < weights.size(); ++e) {
    const double gap = weights[e] * double(state_.samples + 1) - double(state_.drawn[e]);
    if (gap > best_gap) {
      best_gap = gap;
      best = int64_t(e);
    }
  }
  return best;
}

void DataLoader::next(int64_t count, int64_t first, int64_t take, int32_t* windows) {
  const int64_t width = seq_len() + 1;
  for (int64_t i = 0; i < count; ++i) {
    const int64_t entry = choose_entry();
    int64_t& drawn = state_.drawn[size_t(entry)];
    if (i >= first && i < first + take) {
      streams_[size_t(state_.stage)][size_t(entry)]->window(drawn, windows + (i - first) * width);
    }
    ++drawn;
    ++state_.samples;
  }
}

void DataLoader::restore(const LoaderState& state) {
  if (!state.consistent() || state.stage < 0 || state.stage >= int64_t(stages_.size()) ||
      state.drawn.size() != stages_[size_t(state.stage)].mixture.size()) {
    throw Error(cat("saved data position (stage ", state.stage, ", ", state.drawn.size(),
                    " datasets) does not fit the configured stages"))
        .field("data");
  }
  state_ = state;
}

}  // namespace zaya
