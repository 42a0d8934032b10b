#include "optim/param_groups.h"

#include <fnmatch.h>

#include <cstdio>

#include "core/error.h"

namespace zaya {

std::string_view optimizer_name(OptimizerKind kind) {
  return kind == OptimizerKind::Muon ? "muon" : "adamw";
}

std::vector<GroupRule> default_group_rules() {
  using K = OptimizerKind;
  return {
      {"*.self_attn.qkv_proj.*_proj*.weight", K::Muon, true, 1.0f},  // q, k, v_current, v_delayed
      {"*.self_attn.o_proj.weight", K::Muon, true, 1.0f},
      {"*.mlp.experts.gate_up_proj", K::Muon, true, 1.0f},
      {"*.mlp.experts.down_proj", K::Muon, true, 1.0f},
      {"*.mlp.gate.down_proj.weight", K::Muon, true, 1.0f},
      {"*.mlp.gate.router_mlp.fc?.weight", K::Muon, true, 1.0f},
      {"*.mlp.gate.router_mlp.out_proj.weight", K::Muon, true, 1.0f},
      {"model.embed_tokens.weight", K::AdamW, true, 1.0f},
      {"lm_head.weight", K::AdamW, true, 1.0f},
      {"*.conv_qk_*.weight", K::AdamW, true, 1.0f},
      {"*", K::AdamW, false, 1.0f},  // norms, scales, biases, key temperatures
  };
}

std::vector<ParamAssignment> assign_param_groups(const ParameterTable& table,
                                                 const std::vector<GroupRule>& rules) {
  std::vector<ParamAssignment> out;
  for (const ParamInfo& param : table.params()) {
    if (!param.trainable()) continue;
    const GroupRule* match = nullptr;
    for (const GroupRule& rule : rules) {
      if (fnmatch(rule.pattern.c_str(), param.name.c_str(), 0) == 0) {
        match = &rule;
        break;
      }
    }
    if (!match)
      throw Error("no rule matches parameter " + param.name + " (end the list with pattern \"*\")")
          .field("optimizer.groups");
    const bool matrix = param.shape.rank() == 2 || param.role == ParamRole::ExpertWeight;
    if (match->optimizer == OptimizerKind::Muon && !matrix) {
      throw Error("rule \"" + match->pattern + "\" sends " + param.name + " " + param.shape.to_string() +
                  " to muon, which updates matrices only")
          .field("optimizer.groups");
    }
    out.push_back({&param, match->optimizer, match->weight_decay, match->lr_multiplier, match->pattern});
  }
  return out;
}

std::string describe_param_groups(const std::vector<ParamAssignment>& assignments) {
  std::string out;
  char line[512];
  std::snprintf(line, sizeof line, "%-70s %-16s %-6s %-4s %-5s %s\n", "parameter", "shape", "optim", "wd",
                "lr x", "rule");
  out += line;
  for (const ParamAssignment& a : assignments) {
    std::snprintf(line, sizeof line, "%-70s %-16s %-6s %-4s %-5g %s\n", a.param->name.c_str(),
                  a.param->shape.to_string().c_str(), std::string(optimizer_name(a.optimizer)).c_str(),
                  a.weight_decay ? "yes" : "no", double(a.lr_multiplier), a.rule.c_str());
    out += line;
  }
  return out;
}

}  // namespace zaya
