#include "cli/output_guard.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "data/model_tokenizer_files.h"
#include "model/model_dims.h"
#include "model/model_io.h"

namespace zaya::cli {
namespace {
namespace fs = std::filesystem;

fs::path resolved(const std::string& path) {
  std::error_code ignored;
  const fs::path out = fs::weakly_canonical(fs::absolute(path), ignored);
  return out.empty() ? fs::absolute(path).lexically_normal() : out;
}

}  // namespace

void refuse_input_as_output(const std::string& output, const std::string& option,
                            const std::vector<std::string>& inputs, bool force) {
  if (force) return;
  const fs::path out = resolved(output);
  for (const std::string& input : inputs) {
    if (input.empty()) continue;
    if (out == resolved(input)) {
      throw Error(
          cat("would overwrite this command's input ", input, "; choose another path or pass --force"))
          .file(output)
          .field(option);
    }
  }
}

void check_output_file(const std::string& output, const std::string& option,
                       const std::vector<std::string>& inputs, bool force, bool ours) {
  refuse_input_as_output(output, option, inputs, force);
  const fs::path path(output);
  std::error_code error;
  const fs::file_status status = fs::status(path, error);
  if (fs::is_directory(status)) throw Error("is a directory, not a file").file(output).field(option);
  if (fs::exists(status) && !force && !ours)
    throw Error("exists; choose another path or pass --force to replace it").file(output).field(option);
  const fs::path dir = path.parent_path().empty() ? fs::path(".") : path.parent_path();
  if (!fs::is_directory(dir, error))
    throw Error(cat("cannot be written: the directory ", dir.string(), " does not exist"))
        .file(output)
        .field(option);
  // The directory takes a new file: tried, as the write at the end will.
  const fs::path probe = dir / cat(".zaya-probe-", ::getpid());
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    throw Error(cat("cannot be written: ", std::strerror(errno), " (its directory ", dir.string(), ")"))
        .file(output)
        .field(option);
  }
  ::close(fd);
  ::unlink(probe.c_str());
}

std::vector<std::string> model_directory_files(const ZayaConfig& config, const SaveOptions& save,
                                               bool with_tokenizer) {
  std::vector<std::string> files = model_file_names(ParameterTable(model_dims(config)), save);
  if (with_tokenizer) files.insert(files.end(), kModelTokenizerFiles.begin(), kModelTokenizerFiles.end());
  return files;
}

}  // namespace zaya::cli
