#include "io/output_directory.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>

#include "core/error.h"
#include "io/atomic_file.h"
#include "io/file_stamp.h"
#include "io/json_input.h"
#include "io/safetensors_index.h"

namespace zaya {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char* kStagingPrefix = ".zaya-staging-";

// The files the manifest lists, with their stamps; none when it is missing or cannot be read (every file is
// then someone else's).
std::map<std::string, FileStamp> read_manifest(const fs::path& dir) {
  std::map<std::string, FileStamp> files;
  const fs::path path = dir / kOutputManifestFile;
  std::error_code error;
  if (!fs::is_regular_file(path, error)) return files;
  try {
    const json manifest = parse_json(read_text_file(path.string()), path.string());
    for (const auto& [name, stamp] : manifest.at("files").items()) {
      files[name] = {json_int64(stamp.at("bytes"), path.string(), "files." + name + ".bytes"),
                     json_int64(stamp.at("modified_ns"), path.string(), "files." + name + ".modified_ns")};
    }
  } catch (const std::exception&) {
    return {};
  }
  return files;
}

// A staging directory left by a zaya process that is gone.
bool stale_staging(const std::string& name) {
  if (!name.starts_with(kStagingPrefix)) return false;
  char* end = nullptr;
  const long pid = std::strtol(name.c_str() + std::char_traits<char>::length(kStagingPrefix), &end, 10);
  return pid > 0 && *end == '\0' && ::kill(pid_t(pid), 0) != 0 && errno == ESRCH;
}

std::string some_of(const std::vector<std::string>& names) {
  return names.size() == 1 ? names[0] : cat(names[0], " and ", names.size() - 1, " more");
}

}  // namespace

OutputDirectory::OutputDirectory(std::string dir, std::string option, bool force,
                                 std::vector<std::string> files)
    : dir_(std::move(dir)), files_(std::move(files)) {
  const fs::path root(dir_);
  std::error_code error;
  if (fs::exists(root, error) && !fs::is_directory(root, error))
    throw Error("is a file, not a directory").file(dir_).field(option);
  std::vector<std::string> others;
  if (fs::is_directory(root, error)) {
    const std::map<std::string, FileStamp> listed = read_manifest(root);
    try {
      for (const fs::directory_entry& entry : fs::directory_iterator(root)) {
        const std::string name = entry.path().filename().string();
        if (name == kOutputManifestFile && !listed.empty()) continue;
        if (stale_staging(name)) {
          fs::remove_all(entry.path());
          continue;
        }
        const auto it = listed.find(name);
        if (it != listed.end() && file_stamp(entry.path().string()) == it->second) {
          ours_.push_back(name);
        } else {
          others.push_back(name);
        }
      }
    } catch (const fs::filesystem_error& e) {
      throw Error(cat("cannot be read: ", e.code().message())).file(dir_).field(option);
    }
  }
  std::sort(others.begin(), others.end());
  if (!others.empty() && !force) {
    throw Error(
        cat("holds ", some_of(others),
            " that zaya did not write; choose another directory, or pass --force (which replaces only the "
            "files zaya writes and deletes nothing)"))
        .file(dir_)
        .field(option);
  }
  for (const std::string& name : others) {
    if (is_weight_file(name) && std::find(files_.begin(), files_.end(), name) == files_.end()) {
      throw Error(
          cat("holds ", name,
              ", weights zaya did not write, which a loader could read in place of the new model's; remove "
              "it or choose another directory"))
          .file(dir_)
          .field(option);
    }
  }
  staging_ = (root / cat(kStagingPrefix, ::getpid())).string();
  try {
    fs::create_directories(root);
    fs::remove_all(staging_);
    fs::create_directory(staging_);
  } catch (const fs::filesystem_error& e) {
    throw Error(cat("cannot be written: ", e.code().message())).file(dir_).field(option);
  }
}

OutputDirectory::~OutputDirectory() {
  if (published_) return;
  std::error_code ignored;
  fs::remove_all(staging_, ignored);
}

void OutputDirectory::publish() {
  const fs::path root(dir_), staging(staging_);
  for (const std::string& name : files_) {
    if (!fs::is_regular_file(staging / name))
      throw Error(cat("was not written (", name, ")")).file((staging / name).string());
  }
  json manifest = {{"written_by", cat("zaya ", ZAYA_VERSION)}, {"files", json::object()}};
  try {
    for (const std::string& name : files_) fs::rename(staging / name, root / name);
    for (const std::string& name : ours_) {
      if (std::find(files_.begin(), files_.end(), name) == files_.end()) fs::remove(root / name);
    }
    for (const std::string& name : files_) {
      const std::optional<FileStamp> stamp = file_stamp((root / name).string());
      if (!stamp) throw Error("vanished as it was written").file((root / name).string());
      manifest["files"][name] = {{"bytes", stamp->bytes}, {"modified_ns", stamp->modified_ns}};
    }
    write_file_atomic((root / kOutputManifestFile).string(), manifest.dump(2) + "\n");
    fs::remove_all(staging);
    sync_directory(dir_);
  } catch (const fs::filesystem_error& e) {
    throw Error(cat("cannot be written: ", e.code().message())).file(dir_);
  }
  published_ = true;
}

}  // namespace zaya
