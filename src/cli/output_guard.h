#pragma once
// What a command writes never replaces, by surprise, something the user made, and a path it cannot write is
// found before the work, not after it: an output that is one of the command's own inputs is refused, a file
// that exists is replaced only with --force, and its directory must exist and take files. Model directories
// (zaya export, zaya init) are claimed by OutputDirectory (io/output_directory.h), which knows the files zaya
// wrote there.

#include <string>
#include <vector>

namespace zaya {
struct SaveOptions;
struct ZayaConfig;
}  // namespace zaya

namespace zaya::cli {

// Throws Error naming `option` when `output` (its value) is one of `inputs`, unless force.
void refuse_input_as_output(const std::string& output, const std::string& option,
                            const std::vector<std::string>& inputs, bool force);

// A file the command will write (the value of `option`): none of `inputs`; not there yet, unless force
// (which replaces that file alone) or `ours` (zaya wrote it, and it is as zaya left it); in a directory that
// exists and takes a new file (tried). Throws Error naming the option otherwise.
void check_output_file(const std::string& output, const std::string& option,
                       const std::vector<std::string>& inputs, bool force, bool ours = false);

// The files of a model directory that export and init write for `config` saved as `save`: the weights
// (one file or shards and their index), config.json and generation_config.json, and the tokenizer's two
// files `with_tokenizer` (what OutputDirectory claims).
std::vector<std::string> model_directory_files(const ZayaConfig& config, const SaveOptions& save,
                                               bool with_tokenizer);

}  // namespace zaya::cli
