// Expert parallelism: the P ranks of a group share each layer's experts. Each rank groups its routed rows
// by expert as in the local path, so the rows for the experts of rank q are one consecutive block; an
// all-to-all moves every block to its experts' rank, which runs its experts over the rows of all sources
// (one matrix product per source and expert) and sends the results back the same way. Dropless: every row
// goes, however unbalanced the routing.

#include "backend/ops.h"
#include "core/error.h"
#include "dist/communicator.h"
#include "dist/device_communicator.h"
#include "model/expert_exchange.h"
#include "model/layer_activations.h"
#include "model/zaya_model.h"

namespace zaya {
namespace {

// Calls visit(local expert, first row, rows) for each (source, local expert) block of the received rows.
template <typename Visit>
void for_each_block(const ExpertExchange& ex, int ranks, int rank, int64_t experts, Visit visit) {
  const int64_t local = experts / ranks;
  int64_t row = 0;
  for (int source = 0; source < ranks; ++source) {
    for (int64_t l = 0; l < local; ++l) {
      const int64_t rows = ex.table[size_t(source * experts + rank * local + l)];
      visit(l, row, rows);
      row += rows;
    }
  }
}

}  // namespace

void ZayaModel::set_expert_group(DeviceCommunicator* group) {
  if (group && dims_.experts % group->size() != 0) {
    throw Error(cat("expert parallelism over ", group->size(), " ranks needs a multiple of ", group->size(),
                    " experts; the model has ", dims_.experts))
        .field("run.expert_parallel");
  }
  expert_group_ = group && group->size() > 1 ? group : nullptr;
  const int64_t local = expert_group_ ? dims_.experts / expert_group_->size() : dims_.experts;
  const int64_t first = expert_group_ ? expert_group_->rank() * local : 0;
  const ExpertSlice& held = params_.table().experts();
  if (held.first != first || held.count != local) {
    throw Error(cat("the parameter store holds experts [", held.first, ", ", held.first + held.count,
                    ") but this rank of the expert group runs [", first, ", ", first + local, ")"))
        .field("run.expert_parallel");
  }
  exchanges_.resize(expert_group_ ? size_t(dims_.layers) : 0);
}

void ZayaModel::experts_forward_parallel(int layer, LayerActivations& a, const float* x) {
  DeviceCommunicator& group = *expert_group_;
  const int P = group.size(), p = group.rank();
  const int64_t H = dims_.hidden, I = dims_.intermediate, E = dims_.experts, local = E / P;
  const LayerMatrices& m = m_.layers[size_t(layer)];
  ExpertExchange& ex = exchanges_[size_t(layer)];

  // Every rank learns how many rows every rank sends to every expert.
  ex.table.assign(size_t(P * E), 0);
  for (int64_t e = 0; e < E; ++e)
    ex.table[size_t(p * E + e)] = a.host_offsets[size_t(e + 1)] - a.host_offsets[size_t(e)];
  group.host().all_reduce_sum(ex.table.data(), P * E);
  ex.send.assign(size_t(P), 0);
  ex.recv.assign(size_t(P), 0);
  int64_t received = 0;
  for (int q = 0; q < P; ++q) {
    ex.send[size_t(q)] = (a.host_offsets[size_t((q + 1) * local)] - a.host_offsets[size_t(q * local)]) * H;
    for (int64_t l = 0; l < local; ++l) ex.recv[size_t(q)] += ex.table[size_t(q * E + p * local + l)] * H;
    received += ex.recv[size_t(q)] / H;
  }
  ex.received = received;
  ex.x = moe_arena_->alloc<float>(size_t(received * H));
  ex.gate_up = moe_arena_->alloc<float>(size_t(received * 2 * I));
  ex.act = product_activation(received * I, *moe_arena_);
  group.all_to_all(x, ex.send, ex.x, ex.recv);

  float* y = scratch_.alloc<float>(size_t(received * H));
  for_each_block(ex, P, p, E, [&](int64_t e, int64_t begin, int64_t rows) {
    ops_.gemm(precision_, Trans::No, Trans::Yes, rows, 2 * I, H, 1.0f, ex.x + begin * H, H,
              m.gate_up.offset(e * 2 * I * H), H, 0.0f, ex.gate_up + begin * 2 * I, 2 * I);
  });
  ops_.swiglu_forward(ex.gate_up, received, I, ex.act);
  for_each_block(ex, P, p, E, [&](int64_t e, int64_t begin, int64_t rows) {
    ops_.gemm(precision_, Trans::No, Trans::Yes, rows, H, I, 1.0f, ex.act.operand().offset(begin * I), I,
              m.down.offset(e * H * I), I, 0.0f, y + begin * H, H);
  });
  group.all_to_all(y, ex.recv, a.y, ex.send);
}

void ZayaModel::experts_backward_parallel(int layer, const float* d_y, float* d_x) {
  DeviceCommunicator& group = *expert_group_;
  const int P = group.size(), p = group.rank();
  const int64_t H = dims_.hidden, I = dims_.intermediate, E = dims_.experts;
  const LayerMatrices& m = m_.layers[size_t(layer)];
  LayerWeights& g = g_.layers[size_t(layer)];
  const ExpertExchange& ex = exchanges_[size_t(layer)];
  const int64_t received = ex.received;
  auto f = [&](int64_t count) { return scratch_.alloc<float>(size_t(count)); };

  float* d_y_here = f(received * H);
  group.all_to_all(d_y, ex.send, d_y_here, ex.recv);
  float* d_act = f(received * I);
  for_each_block(ex, P, p, E, [&](int64_t e, int64_t begin, int64_t rows) {
    ops_.gemm(precision_, Trans::No, Trans::No, rows, I, H, 1.0f, d_y_here + begin * H, H,
              m.down.offset(e * H * I), I, 0.0f, d_act + begin * I, I);
    ops_.gemm(precision_, Trans::Yes, Trans::No, H, I, rows, 1.0f, d_y_here + begin * H, H,
              ex.act.operand().offset(begin * I), I, 1.0f, g.down + e * H * I, I);
  });
  const Destination d_gate_up = product_activation(received * 2 * I, scratch_);
  ops_.swiglu_backward(ex.gate_up, d_act, received, I, d_gate_up);
  float* d_x_here = f(received * H);
  for_each_block(ex, P, p, E, [&](int64_t e, int64_t begin, int64_t rows) {
    ops_.gemm(precision_, Trans::Yes, Trans::No, 2 * I, H, rows, 1.0f,
              d_gate_up.operand().offset(begin * 2 * I), 2 * I, ex.x + begin * H, H, 1.0f,
              g.gate_up + e * 2 * I * H, H);
    ops_.gemm(precision_, Trans::No, Trans::No, rows, H, 2 * I, 1.0f,
              d_gate_up.operand().offset(begin * 2 * I), 2 * I, m.gate_up.offset(e * 2 * I * H), H, 0.0f,
              d_x_here + begin * H, H);
  });
  group.all_to_all(d_x_here, ex.recv, d_x, ex.send);
}

}  // namespace zaya
