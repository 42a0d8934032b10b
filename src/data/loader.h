#pragma once
// Training samples: windows of seq_len + 1 tokens cut from each dataset's documents, concatenated in a
// shuffled order (each window's last token is the next window's first, so every token is a target once),
// drawn from a weighted mixture of datasets, stage by stage. The order is a pure function of the seed and
// the sample number: it does not depend on the thread or rank count, and a saved LoaderState resumes it
// exactly.

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "data/indexed_dataset.h"
#include "data/permutation.h"

namespace zaya {

struct MixtureEntry {
  std::string prefix;  // an indexed dataset: PREFIX.bin + PREFIX.idx
  double weight = 1.0;
};

struct StageData {
  int64_t seq_len = 0;
  std::vector<MixtureEntry> mixture;
};

struct LoaderState {
  int64_t stage = 0;
  int64_t samples = 0;         // drawn in this stage, over all ranks
  std::vector<int64_t> drawn;  // per mixture entry of the stage
  bool operator==(const LoaderState&) const = default;
  // Every sample drawn from one entry: the drawn counts add up to samples, none negative. A saved state
  // that does not would make the loader seek for ever to a window past its data.
  bool consistent() const {
    int64_t total = 0;  // each entry in [0, samples], so that the sum cannot overflow
    for (const int64_t n : drawn) {
      if (n < 0 || n > samples) return false;
      total += n;
    }
    return samples >= 0 && total == samples;
  }
};

class DataLoader {
 public:
  // Opens every dataset of every stage (once each) and checks each can fill a window. vocab_limit: a token
  // id at or above it is an error naming the file (0: unchecked).
  DataLoader(std::vector<StageData> stages, uint64_t seed, int64_t vocab_limit);
  ~DataLoader();

  // Draws the next `count` samples of the stage and writes those numbered [first, first + take) of them
  // (a rank's slice of the global batch) into windows [take, seq_len + 1].
  void next(int64_t count, int64_t first, int64_t take, int32_t* windows);
  // Moves to a stage (its draw starts from the beginning).
  void start_stage(int64_t stage);

  int64_t stage() const { return state_.stage; }
  int64_t seq_len() const { return stages_[size_t(state_.stage)].seq_len; }
  const LoaderState& state() const { return state_; }
  void restore(const LoaderState& state);  // throws Error if it does not fit this configuration

 private:
  class Stream;  // one dataset's windows at one stage's sequence length
  int64_t choose_entry();

  std::vector<StageData> stages_;
  uint64_t seed_;
  int64_t vocab_limit_;
  std::map<std::string, std::shared_ptr<IndexedDataset>> datasets_;
  std::vector<std::vector<std::unique_ptr<Stream>>> streams_;  // [stage][entry]
  std::vector<std::vector<double>> weights_;                   // [stage][entry], normalised
  LoaderState state_;
};

}  // namespace zaya
