// context_parallel_check, run under an MPI launcher with G ranks (2 or 4): the tiny model's forward and
// backward with each sequence split over the G ranks (ZayaModel::set_context_group) against the same
// sequences whole on one rank. For each case every rank runs the whole batch, then its slice; the slices'
// losses and gradients summed over the ranks must equal the whole batch's, and each slice's logits the
// whole batch's rows at its positions. The cases put the split at every place CCA's mixing reaches across
// it: slices as short as the convolutions' halo (which then comes whole from the previous rank), odd
// lengths, windows shorter than a slice, spanning one or several, the delayed values' one-position halo,
// GQA heads shared by two ranks (G = 4: one query head each, two per key-value head) or held whole (G = 2).
// Documents need no case of their own: ZAYA (as transformers runs it) attends and convolves across the
// documents packed into a sequence, so a document boundary on the split is a position like any other (the
// training runs of distributed_test.sh, on packed documents, put boundaries everywhere).
// Then the same on the GPU emulator through the staged communicator (device memory), and the one-line
// errors. Rank 0 prints one line per check; every rank exits 1 when any check failed anywhere.

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "backend/gpu/device.h"
#include "backend/ops.h"
#include "core/error.h"
#include "dist/communicator.h"
#include "dist/device_communicator.h"
#include "io/hf_config.h"
#include "model/model_dims.h"
#include "model/model_io.h"
#include "model/parameters.h"
#include "model/zaya_model.h"

namespace {

using namespace zaya;

int failures = 0;

void expect(Communicator& comm, bool passed, const std::string& what) {
  int64_t failed = passed ? 0 : 1;
  comm.all_reduce_max(&failed, 1);
  failures += int(failed);
  if (comm.rank() == 0) std::printf("%s: %s\n", failed ? "FAIL" : "ok", what.c_str());
}

struct Case {
  std::string name;
  int64_t batch = 1, slice = 1;  // sequences, and positions per rank
  int64_t window = 0;            // the sliding-window layer's
  int64_t time0 = 2, time1 = 2;  // the convolutions' kernels: a halo of (time0 - 1) + (time1 - 1)
  bool aux_loss = false, recompute = false;
  Precision precision = Precision::F32;
  double bound = 0;  // largest error relative to each tensor's largest magnitude
};

ZayaConfig case_config(const Case& c) {
  ZayaConfig config = preset_config("tiny");  // layer 0 full causal, layer 1 a sliding window
  config.sliding_window = c.window;
  config.cca_time0 = c.time0;
  config.cca_time1 = c.time1;
  validate_config(config, c.name);
  return config;
}

// What a pass gives: the loss, every gradient and the logits [tokens, vocab], on the host.
struct Pass {
  double loss = 0;
  std::vector<float> grads, logits;
};

Pass run(ZayaModel& model, const Batch& batch, float loss_scale) {
  ParameterStore& params = model.params();
  Ops& ops = model.ops();
  params.zero_grads();
  const ForwardResult result = model.forward_backward(batch, loss_scale, true);
  Pass pass;
  pass.loss = result.loss_sum;
  pass.grads.resize(size_t(params.table().total_floats()));
  ops.read_to_host(pass.grads.data(), params.grads(), pass.grads.size() * sizeof(float));
  pass.logits.resize(size_t(batch.tokens() * params.dims().vocab));
  ops.read_to_host(pass.logits.data(), result.logits, pass.logits.size() * sizeof(float));
  return pass;
}

// The largest difference of a against b relative to b's largest magnitude, over [from, from + count).
double relative_error(const std::vector<float>& a, const std::vector<float>& b, size_t from, size_t count) {
  double diff = 0, scale = 0;
  for (size_t i = from; i < from + count; ++i) {
    diff = std::max(diff, std::fabs(double(a[i]) - double(b[i])));
    scale = std::max(scale, std::fabs(double(b[i])));
  }
  return scale > 0 ? diff / scale : diff;
}

void check_case(Communicator& comm, Ops& ops, DeviceCommunicator& group, const Case& c) {
  const int G = comm.size(), r = comm.rank();
  const ZayaConfig config = case_config(c);
  const ModelDims dims = model_dims(config);
  ParameterStore drawn(dims);
  init_parameters(drawn, 0.02, 7);
  const std::unique_ptr<ParameterStore> params = place_parameters(drawn, ops.memory());

  // Whole sequences of S = G x slice tokens, a few positions unlabelled.
  const int64_t B = c.batch, L = c.slice, S = G * L, V = dims.vocab;
  std::vector<int32_t> ids(size_t(B * S));
  uint64_t state = 12345;
  for (int32_t& id : ids) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    id = int32_t((state >> 33) % uint64_t(V));
  }
  std::vector<int32_t> labels = shifted_labels(ids.data(), B, S);
  for (size_t t = 5; t < labels.size(); t += 11) labels[t] = kIgnoreLabel;
  int64_t labelled = 0;
  for (const int32_t label : labels) labelled += label != kIgnoreLabel;
  const float loss_scale = 1.0f / float(labelled);

  RouterAuxLoss aux;
  if (c.aux_loss) aux = {0.01f, 0.001f};
  ZayaModel whole_model(*params, ops, c.precision);
  whole_model.set_router_aux_loss(aux);
  whole_model.set_recompute(c.recompute ? Recompute::Layer : Recompute::None);
  const Pass whole = run(whole_model, Batch{ids.data(), labels.data(), nullptr, B, S}, loss_scale);

  // This rank's slice of each sequence.
  std::vector<int32_t> slice_ids, slice_labels;
  for (int64_t b = 0; b < B; ++b) {
    const size_t first = size_t(b * S + r * L);
    slice_ids.insert(slice_ids.end(), ids.begin() + long(first), ids.begin() + long(first + size_t(L)));
    slice_labels.insert(slice_labels.end(), labels.begin() + long(first),
                        labels.begin() + long(first + size_t(L)));
  }
  ZayaModel split_model(*params, ops, c.precision);
  split_model.set_router_aux_loss(aux);
  split_model.set_recompute(c.recompute ? Recompute::Layer : Recompute::None);
  split_model.set_context_group(&group);
  Batch slice{slice_ids.data(), slice_labels.data(), nullptr, B, L};
  slice.context_slice = true;
  Pass split = run(split_model, slice, loss_scale);
  comm.all_reduce_sum(&split.loss, 1);
  comm.all_reduce_sum(split.grads.data(), int64_t(split.grads.size()));

  const double loss_error = std::fabs(split.loss - whole.loss) / std::fabs(whole.loss);
  double grad_error = 0, logit_error = 0;
  std::string worst;
  for (const ParamInfo& param : params->table().params()) {
    const double error =
        relative_error(split.grads, whole.grads, size_t(param.offset), size_t(param.numel()));
    if (error > grad_error) grad_error = error, worst = param.name;
  }
  std::vector<float> whole_rows;
  for (int64_t b = 0; b < B; ++b) {
    const auto first = whole.logits.begin() + long((b * S + r * L) * V);
    whole_rows.insert(whole_rows.end(), first, first + long(L * V));
  }
  logit_error = relative_error(split.logits, whole_rows, 0, whole_rows.size());
  double errors[3] = {loss_error, grad_error, logit_error};
  comm.all_reduce_sum(errors, 3);  // rank 0 reports every rank's worst (the loss and gradients agree)
  char line[512];
  std::snprintf(line, sizeof line, "%s: loss %.1e, gradients %.1e (worst %s), logits %.1e (bound %.0e)",
                c.name.c_str(), errors[0] / G, errors[1] / G, worst.c_str(), errors[2], c.bound);
  expect(comm, loss_error <= c.bound && grad_error <= c.bound && logit_error <= c.bound, line);
}

// The one-line errors: a group that does not divide the heads, a slice shorter than the halo, padding.
void check_errors(Communicator& comm, DeviceCommunicator& group) {
  const int G = comm.size();
  ZayaConfig config = preset_config("tiny");
  config.num_attention_heads = G / 2;  // fewer heads than ranks
  config.num_key_value_heads = 1;
  bool refused = false;
  try {
    ParameterStore params(model_dims(config));
    ZayaModel model(params, cpu_ops());
    model.set_context_group(&group);
  } catch (const Error& e) {
    refused = std::string(e.what()).find("run.context_parallel") != std::string::npos;
  }
  expect(comm, refused, "a group that does not divide the attention heads is refused (run.context_parallel)");

  const ModelDims dims = model_dims(preset_config("tiny"));
  ParameterStore params(dims);
  ZayaModel model(params, cpu_ops());
  model.set_context_group(&group);
  const std::vector<int32_t> ids = {1, 2, 3, 4};
  const std::vector<float> mask = {1, 1, 1, 0};
  Batch short_slice{ids.data(), nullptr, nullptr, 1, 1};
  short_slice.context_slice = true;
  Batch padded{ids.data(), nullptr, mask.data(), 1, 4};
  padded.context_slice = true;
  for (const auto& [batch, field] :
       {std::pair<Batch, std::string>{short_slice, "run.context_parallel"}, {padded, "attention_mask"}}) {
    std::string said;
    try {
      model.forward(batch);
    } catch (const Error& e) {
      said = e.what();
    }
    expect(comm, said.find(field) != std::string::npos, "a slice the split cannot take is refused: " + said);
  }
}

}  // namespace

int main() {
  try {
    const std::unique_ptr<Communicator> comm = make_mpi_communicator();
    const std::unique_ptr<DeviceCommunicator> host_group = make_host_device_communicator(*comm);
    const std::vector<Case> cases = {
        {"slices of 16, a window of 20 spanning slices", 2, 16, 20, 2, 2, false, false, Precision::F32, 1e-5},
        {"slices as short as the halo (3), a window of 4", 1, 3, 4, 3, 2, false, false, Precision::F32, 1e-5},
        {"odd slices of 7 (window 5, halo 3), aux losses, recompute", 2, 7, 5, 2, 3, true, true,
         Precision::F32, 1e-5},
    };
    for (const Case& c : cases) check_case(*comm, cpu_ops(), *host_group, c);

    Ops& gpu = gpu::ops();
    const std::unique_ptr<DeviceCommunicator> staged = make_staged_communicator(*comm, gpu.memory());
    Case emulated = cases[0];
    emulated.name = "emulated GPU, staged communicator: " + emulated.name;
    check_case(*comm, gpu, *staged, emulated);
    emulated = cases[2];
    emulated.name = "emulated GPU, bf16: " + cases[2].name;
    emulated.precision = Precision::BF16;
    check_case(*comm, gpu, *staged, emulated);

    check_errors(*comm, *host_group);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "context_parallel_check: %s\n", e.what());
    return 2;
  }
  return failures ? 1 : 0;
}
