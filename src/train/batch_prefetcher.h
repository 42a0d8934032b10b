#pragma once
// A training run's batches: this rank's part of the next global batch drawn on a background thread while the
// current step trains. Of a batch's micro-batches, rank r takes the r-th share of an even split, so that a
// run sees the same data on any number of ranks.

#include <cstdint>
#include <future>
#include <vector>

#include "data/loader.h"

namespace zaya {

// Windows [count, seq + 1] into model inputs and their next-token labels, [count, seq / slices] each: the
// positions of slice `slice` of `slices` equal ones (context parallelism; the whole sequence with 0 of 1).
void split_windows(const std::vector<int32_t>& windows, int64_t count, int64_t seq, int slice, int slices,
                   std::vector<int32_t>& ids, std::vector<int32_t>& labels);

class BatchPrefetcher {
 public:
  struct Batch {
    std::vector<int32_t> windows;        // [mine, seq_len + 1]: this rank's sequences
    int64_t sequences = 0, seq_len = 0;  // sequences: of the global batch
    int64_t mine = 0;
    LoaderState after;  // the loader's position once this batch is drawn
  };

  BatchPrefetcher(DataLoader& loader, int64_t micro_batch, int rank, int ranks);
  ~BatchPrefetcher();
  BatchPrefetcher(const BatchPrefetcher&) = delete;
  BatchPrefetcher& operator=(const BatchPrefetcher&) = delete;

  // Starts drawing the batch of `sequences` of `stage`.
  void request(int64_t stage, int64_t sequences);
  // The batch requested last, once drawn.
  Batch take();

 private:
  DataLoader& loader_;
  int64_t micro_batch_;
  int rank_, ranks_;
  std::future<Batch> pending_;
};

}  // namespace zaya
