#pragma once
// What a command writes never replaces, by surprise, something the user made: an output that is one of the
// command's own inputs, or that is a model or checkpoint directory (or a file already in one), is refused
// with an error naming the option, unless the command's --force says so.

#include <string>
#include <vector>

namespace zaya::cli {

// Throws Error when `output` (the value of `option`) would overwrite one of `inputs` or a model or
// checkpoint, and force is false.
void guard_output(const std::string& output, const std::string& option,
                  const std::vector<std::string>& inputs, bool force);

}  // namespace zaya::cli
