// Context parallelism: the C ranks of a group each hold one consecutive slice of the same sequences (rank r
// of the group positions [r L, (r + 1) L) of each, L = S / C). Everything but CCA's mixing over time works
// on the slice as it is; the mixing gets what it reads from the other ranks:
// - the convolutions read the (k0 - 1) + (k1 - 1) positions before the slice, the value delay the one
//   before: the previous rank's last rows (a halo), whose gradient goes back to it in the backward pass;
// - attention is head-parallel (as DeepSpeed-Ulysses): an all-to-all turns the slices of every head into
//   whole sequences of C-th of the query heads (with the key-value heads they read), the attention runs on
//   those unchanged (causal and window masks, tile skipping, its kernels: no change), and another all-to-all
//   turns its output back into slices. Every rank does the same causal work (whole sequences), whatever
//   the layer's window.

#include <algorithm>
#include <chrono>

#include "backend/ops.h"
#include "core/error.h"
#include "dist/device_communicator.h"
#include "model/zaya_model.h"

namespace zaya {

void ZayaModel::set_context_group(DeviceCommunicator* group) {
  const int C = group ? group->size() : 1;
  const int64_t heads = dims_.heads, kv_heads = dims_.kv_heads;
  // Each rank takes heads / C query heads; they must fall in whole key-value groups, or within one.
  const int64_t per_rank = heads / C, group_size = heads / kv_heads;
  if (heads % C != 0 || (per_rank % group_size != 0 && group_size % per_rank != 0)) {
    throw Error(cat("context parallelism over ", C, " ranks splits the ", heads,
                    " attention heads among them: it needs a divisor of ", heads, " (in whole groups of ",
                    group_size, " heads sharing a key-value head, or within one)"))
        .field("run.context_parallel");
  }
  context_group_ = C > 1 ? group : nullptr;
  query_heads_ = head_split(C, false);
  kv_heads_ = head_split(C, true);
}

void ZayaModel::check_slice(const Batch& batch) const {
  if (batch.attention_mask)
    throw Error("context parallelism splits whole sequences: a batch with padding cannot be split")
        .field("attention_mask");
  if (batch.seq < std::max<int64_t>(1, context_halo())) {
    throw Error(cat("a context-parallel slice of ", batch.seq, " positions is shorter than the ",
                    context_halo(), " the convolutions read before it"))
        .field("run.context_parallel");
  }
}

bool ZayaModel::sliced(const Batch& batch) const {
  return context_group_ && batch.context_slice;
}

int64_t ZayaModel::context_halo() const {
  return (dims_.conv_time0 - 1) + (dims_.conv_time1 - 1);
}

// Rank j of C attends over query heads [j H / C, (j + 1) H / C) and the key-value heads those read.
ZayaModel::HeadSplit ZayaModel::head_split(int ranks, bool kv) const {
  const int64_t per_rank = dims_.heads / ranks, group_size = dims_.heads / dims_.kv_heads;
  HeadSplit split;
  for (int j = 0; j < ranks; ++j) {
    split.first.push_back(kv ? j * per_rank / group_size : j * per_rank);
    split.count.push_back(kv ? std::max<int64_t>(1, per_rank / group_size) : per_rank);
  }
  split.heads = kv ? dims_.kv_heads : dims_.heads;
  return split;
}

AttentionShape ZayaModel::heads_shape(AttentionShape shape) const {
  const int r = context_group_->rank();
  shape.seq *= context_group_->size();
  shape.heads = query_heads_.count[size_t(r)];
  shape.kv_heads = kv_heads_.count[size_t(r)];
  return shape;
}

void ZayaModel::context_all_to_all(const float* send, const std::vector<int64_t>& send_counts, float* recv,
                                   const std::vector<int64_t>& recv_counts) {
  const auto start = std::chrono::steady_clock::now();
  context_group_->all_to_all(send, send_counts, recv, recv_counts);
  context_exchange_.seconds +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (size_t j = 0; j < send_counts.size(); ++j) {
    if (int(j) != context_group_->rank()) context_exchange_.bytes += send_counts[j] * int64_t(sizeof(float));
  }
}

void ZayaModel::halo_forward(const float* x, int64_t ld, int64_t n, int64_t rows, const Batch& batch,
                             float* halo) {
  DeviceCommunicator& group = *context_group_;
  const int C = group.size(), r = group.rank();
  const int64_t B = batch.batch, L = batch.seq;
  const Arena::Mark mark = scratch_.mark();
  float* send = scratch_.alloc<float>(size_t(B * rows * n));  // [B, rows, n]
  for (int64_t b = 0; b < B; ++b)
    ops_.copy_rows(x + (b * L + L - rows) * ld, ld, rows, n, send + b * rows * n, n, false);
  std::vector<int64_t>& send_counts = send_counts_;
  std::vector<int64_t>& recv_counts = recv_counts_;
  send_counts.assign(size_t(C), 0);
  recv_counts.assign(size_t(C), 0);
  if (r + 1 < C) send_counts[size_t(r + 1)] = B * rows * n;
  if (r > 0) recv_counts[size_t(r - 1)] = B * rows * n;
  context_all_to_all(send, send_counts, halo, recv_counts);
  if (r == 0) ops_.fill(halo, B * rows * n, 0.0f);  // before the first position: the convolution's padding
  scratch_.rewind(mark);
}

void ZayaModel::halo_backward(const float* d_halo, int64_t n, int64_t rows, const Batch& batch, float* dx,
                              int64_t ld) {
  DeviceCommunicator& group = *context_group_;
  const int C = group.size(), r = group.rank();
  const int64_t B = batch.batch, L = batch.seq;
  const Arena::Mark mark = scratch_.mark();
  float* recv = scratch_.alloc<float>(size_t(B * rows * n));  // [B, rows, n] from the next rank
  std::vector<int64_t>& send_counts = send_counts_;
  std::vector<int64_t>& recv_counts = recv_counts_;
  send_counts.assign(size_t(C), 0);
  recv_counts.assign(size_t(C), 0);
  if (r > 0) send_counts[size_t(r - 1)] = B * rows * n;
  if (r + 1 < C) recv_counts[size_t(r + 1)] = B * rows * n;
  context_all_to_all(d_halo, send_counts, recv, recv_counts);
  for (int64_t b = 0; r + 1 < C && b < B; ++b)
    ops_.copy_rows(recv + b * rows * n, n, rows, n, dx + (b * L + L - rows) * ld, ld, true);
  scratch_.rewind(mark);
}

void ZayaModel::to_heads(const float* x, const HeadSplit& split, const Batch& batch, float* out) {
  DeviceCommunicator& group = *context_group_;
  const int C = group.size(), r = group.rank();
  const int64_t B = batch.batch, L = batch.seq, S = L * C, T = B * L, D = dims_.head_dim;
  const int64_t width = split.heads * D, mine = split.count[size_t(r)] * D;
  const Arena::Mark mark = scratch_.mark();
  std::vector<int64_t>& send_counts = send_counts_;
  std::vector<int64_t>& recv_counts = recv_counts_;
  send_counts.assign(size_t(C), 0);
  recv_counts.assign(size_t(C), T * mine);
  int64_t sent = 0;
  for (int j = 0; j < C; ++j) sent += send_counts[size_t(j)] = T * split.count[size_t(j)] * D;
  float* send = scratch_.alloc<float>(size_t(sent));          // for each rank j: [B, L, its heads, D]
  float* recv = scratch_.alloc<float>(size_t(C * T * mine));  // from each rank i: [B, L (slice i), mine]
  for (int64_t j = 0, offset = 0; j < C; offset += send_counts[size_t(j)], ++j) {
    const int64_t columns = split.count[size_t(j)] * D;
    ops_.copy_rows(x + split.first[size_t(j)] * D, width, T, columns, send + offset, columns, false);
  }
  context_all_to_all(send, send_counts, recv, recv_counts);
  for (int i = 0; i < C; ++i) {
    for (int64_t b = 0; b < B; ++b)
      ops_.copy_rows(recv + (i * T + b * L) * mine, mine, L, mine, out + (b * S + i * L) * mine, mine, false);
  }
  scratch_.rewind(mark);
}

void ZayaModel::from_heads(const float* y, const HeadSplit& split, const Batch& batch, float* x) {
  DeviceCommunicator& group = *context_group_;
  const int C = group.size(), r = group.rank();
  const int64_t B = batch.batch, L = batch.seq, S = L * C, T = B * L, D = dims_.head_dim;
  const int64_t width = split.heads * D, mine = split.count[size_t(r)] * D;
  const Arena::Mark mark = scratch_.mark();
  std::vector<int64_t>& send_counts = send_counts_;
  std::vector<int64_t>& recv_counts = recv_counts_;
  send_counts.assign(size_t(C), T * mine);
  recv_counts.assign(size_t(C), 0);
  int64_t received = 0;
  for (int j = 0; j < C; ++j) received += recv_counts[size_t(j)] = T * split.count[size_t(j)] * D;
  float* send = scratch_.alloc<float>(size_t(C * T * mine));  // to each rank i: [B, L (slice i), mine]
  float* recv = scratch_.alloc<float>(size_t(received));      // from each rank j: [B, L, its heads, D]
  for (int i = 0; i < C; ++i) {
    for (int64_t b = 0; b < B; ++b)
      ops_.copy_rows(y + (b * S + i * L) * mine, mine, L, mine, send + (i * T + b * L) * mine, mine, false);
  }
  context_all_to_all(send, send_counts, recv, recv_counts);
  // Ranks that share a key-value head each send their part of its gradient: those add up, in rank order.
  bool shared = false;
  for (int j = 1; j < C; ++j) shared |= split.first[size_t(j)] == split.first[size_t(j - 1)];
  if (shared) ops_.fill(x, T * width, 0.0f);
  for (int64_t j = 0, offset = 0; j < C; offset += recv_counts[size_t(j)], ++j) {
    const int64_t columns = split.count[size_t(j)] * D;
    ops_.copy_rows(recv + offset, columns, T, columns, x + split.first[size_t(j)] * D, width, shared);
  }
  scratch_.rewind(mark);
}

}  // namespace zaya
