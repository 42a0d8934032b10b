#include "cli/output_guard.h"

#include <filesystem>

#include "core/error.h"

namespace zaya::cli {
namespace {
namespace fs = std::filesystem;

fs::path resolved(const std::string& path) {
  std::error_code ignored;
  const fs::path out = fs::weakly_canonical(fs::absolute(path), ignored);
  return out.empty() ? fs::absolute(path).lexically_normal() : out;
}

// A model directory (config.json, with or without its weights yet) or a checkpoint (checksums.json).
bool holds_model(const fs::path& dir) {
  std::error_code ignored;
  return fs::is_directory(dir, ignored) &&
         (fs::exists(dir / "config.json", ignored) || fs::exists(dir / "checksums.json", ignored));
}

}  // namespace

void guard_output(const std::string& output, const std::string& option,
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
  std::error_code ignored;
  const bool model = holds_model(out) || (fs::exists(out, ignored) && holds_model(out.parent_path()));
  if (model) {
    throw Error("would overwrite a model or checkpoint; choose another path or pass --force")
        .file(output)
        .field(option);
  }
}

}  // namespace zaya::cli
