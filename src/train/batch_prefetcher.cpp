#include "train/batch_prefetcher.h"

#include "dist/communicator.h"

namespace zaya {

void split_windows(const std::vector<int32_t>& windows, int64_t count, int64_t seq, int slice, int slices,
                   std::vector<int32_t>& ids, std::vector<int32_t>& labels) {
  ids.clear();
  labels.clear();
  const int64_t length = seq / slices;
  for (int64_t w = 0; w < count; ++w) {
    const int32_t* window = windows.data() + w * (seq + 1) + slice * length;
    ids.insert(ids.end(), window, window + length);
    labels.insert(labels.end(), window + 1, window + length + 1);
  }
}

BatchPrefetcher::BatchPrefetcher(DataLoader& loader, int64_t micro_batch, int rank, int ranks)
    : loader_(loader), micro_batch_(micro_batch), rank_(rank), ranks_(ranks) {}

BatchPrefetcher::~BatchPrefetcher() {
  if (pending_.valid()) pending_.wait();
}

void BatchPrefetcher::request(int64_t stage, int64_t sequences) {
  if (loader_.stage() != stage) loader_.start_stage(stage);
  pending_ = std::async(std::launch::async, [this, sequences] {
    Batch batch;
    batch.sequences = sequences;
    batch.seq_len = loader_.seq_len();
    const Share share = even_share(sequences / micro_batch_, ranks_, rank_);
    batch.mine = share.count * micro_batch_;
    batch.windows.resize(size_t(batch.mine * (batch.seq_len + 1)));
    loader_.next(sequences, share.first * micro_batch_, batch.mine, batch.windows.data());
    batch.after = loader_.state();
    return batch;
  });
}

BatchPrefetcher::Batch BatchPrefetcher::take() {
  return pending_.get();
}

}  // namespace zaya
