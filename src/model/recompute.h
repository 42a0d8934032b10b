#pragma once
// What a training pass keeps of each layer for its backward pass, and what the backward pass computes again
// from the layer's input instead (run.recompute): a layer's forward work traded for its memory. The
// gradients are byte-identical whichever it is: the ops are deterministic, and the backward pass recomputes
// from the same inputs in the same order.

#include <optional>
#include <string>

namespace zaya {

enum class Recompute {
  None,       // every layer's activations kept
  Attention,  // the attention block's (projections, convolutions, q, k, v, its output) computed again
  Layer,      // only each layer's input and router state kept; the whole layer computed again
};

inline const char* recompute_name(Recompute recompute) {
  return recompute == Recompute::None ? "none" : recompute == Recompute::Attention ? "attention" : "layer";
}

inline std::optional<Recompute> recompute_from_name(const std::string& name) {
  for (Recompute r : {Recompute::None, Recompute::Attention, Recompute::Layer}) {
    if (name == recompute_name(r)) return r;
  }
  return std::nullopt;
}

}  // namespace zaya
