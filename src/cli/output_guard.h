#pragma once
// What a command writes never replaces, by surprise, something the user made, and a path it cannot write is
// found before the work, not after it: an output that is one of the command's own inputs is refused, a file
// that exists is replaced only with --force, and its directory must exist and take files. Model directories
// (zaya export, zaya init) are claimed by OutputDirectory (io/output_directory.h), which knows the files zaya
// wrote there.

#include <string>
#include <vector>

namespace zaya::cli {

// Throws Error naming `option` when `output` (its value) is one of `inputs`, unless force.
void refuse_input_as_output(const std::string& output, const std::string& option,
                            const std::vector<std::string>& inputs, bool force);

// A file the command will write (the value of `option`): none of `inputs`; not there yet, unless force
// (which replaces that file alone) or `ours` (zaya wrote it, and it is as zaya left it); in a directory that
// exists and takes a new file (tried). Throws Error naming the option otherwise.
void check_output_file(const std::string& output, const std::string& option,
                       const std::vector<std::string>& inputs, bool force, bool ours = false);

}  // namespace zaya::cli
