#pragma once
// Which optimizer updates which parameter, decided by ordered name patterns (shell globs; the first rule
// that matches a parameter's name wins). The defaults send the hidden matrices to Muon and everything
// else to AdamW, with no weight decay on gains and biases.

#include <string>
#include <vector>

#include "model/parameters.h"

namespace zaya {

enum class OptimizerKind { Muon, AdamW };
std::string_view optimizer_name(OptimizerKind kind);

struct GroupRule {
  std::string pattern;  // glob over the parameter name, e.g. "*.mlp.experts.*"
  OptimizerKind optimizer = OptimizerKind::AdamW;
  bool weight_decay = false;
  float lr_multiplier = 1.0f;
};

// Attention projections, expert matrices and the router's matrices to Muon (with weight decay); the
// embedding, LM head and convolution kernels to AdamW with weight decay; norms, scales, biases and key
// temperatures to AdamW without.
std::vector<GroupRule> default_group_rules();

struct ParamAssignment {
  const ParamInfo* param = nullptr;
  OptimizerKind optimizer = OptimizerKind::AdamW;
  bool weight_decay = false;
  float lr_multiplier = 1.0f;
  std::string rule;  // the pattern that matched
};

// One entry per trainable parameter, in table order. Throws Error (field "optimizer.groups") when a
// parameter matches no rule, or a rule sends something that is not a matrix to Muon.
std::vector<ParamAssignment> assign_param_groups(const ParameterTable& table,
                                                 const std::vector<GroupRule>& rules);
// The assignment as a table, one parameter per line.
std::string describe_param_groups(const std::vector<ParamAssignment>& assignments);

}  // namespace zaya
