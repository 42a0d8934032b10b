#include "train/checkpoint_catalog.h"

#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "core/error.h"
#include "data/loader.h"
#include "io/atomic_file.h"
#include "io/json_input.h"

namespace zaya {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char* kLatest = "latest";

// The optimizer shards a checksum listing names.
std::vector<std::string> optimizer_files(const json& checksums) {
  std::vector<std::string> out;
  for (const auto& [file, crc] : checksums.items()) {
    if (file.starts_with(kCheckpointOptimizerPrefix) && file.ends_with(".safetensors")) out.push_back(file);
  }
  return out;
}

// N for a directory named step_<N> (digits only: not a temporary or set-aside one), else -1.
int64_t step_of(const fs::path& dir) {
  const std::string name = dir.filename().string();
  const std::string digits = name.starts_with("step_") ? name.substr(5) : "";
  if (digits.empty() || digits.size() > 18 || digits.find_first_not_of("0123456789") != std::string::npos)
    return -1;
  return std::stoll(digits);
}

// The run's step_<N> directories, newest first.
std::vector<std::pair<int64_t, fs::path>> step_directories(const fs::path& root) {
  std::vector<std::pair<int64_t, fs::path>> all;
  for (const auto& entry : fs::directory_iterator(root)) {
    if (entry.is_directory() && step_of(entry.path()) >= 0)
      all.emplace_back(step_of(entry.path()), entry.path());
  }
  std::sort(all.rbegin(), all.rend());
  return all;
}

// Whether a step directory holds nothing but a checkpoint zaya wrote: every file in it is listed in its
// checksums (which rotation may then delete), no other file, and no directory.
bool only_checkpoint_files(const fs::path& dir) {
  try {
    const std::string listing = (dir / kCheckpointChecksumFile).string();
    const json checksums = parse_json(read_text_file(listing), listing);
    for (const auto& entry : fs::directory_iterator(dir)) {
      const std::string name = entry.path().filename().string();
      if (!entry.is_regular_file() || (name != kCheckpointChecksumFile && !checksums.contains(name)))
        return false;
    }
  } catch (const std::exception&) {
    return false;
  }
  return true;
}

}  // namespace

std::string file_checksum(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot read").file(path);
  uLong crc = crc32(0L, Z_NULL, 0);
  // 64 KiB per read, large enough that a read costs its bytes. A 1 MiB buffer was mapped, zeroed and unmapped
  // on every call: under the fuzzer's ASan, most of the time of verifying a checkpoint of small files.
  std::vector<char> buffer(size_t(64) << 10);
  while (in) {
    in.read(buffer.data(), std::streamsize(buffer.size()));
    crc = crc32(crc, reinterpret_cast<const Bytef*>(buffer.data()), uInt(in.gcount()));
  }
  char hex[16];
  std::snprintf(hex, sizeof hex, "%08lx", static_cast<unsigned long>(crc));
  return hex;
}

std::string checkpoint_temp_dir(const std::string& run_dir, int64_t step) {
  return (fs::path(run_dir) / "checkpoints" / (".step_" + std::to_string(step) + ".tmp")).string();
}

void publish_checkpoint(const std::string& temp_dir, int64_t step, const FileChecksums& checksums,
                        const std::string& run_dir, int keep) {
  const fs::path temp(temp_dir), root = fs::path(run_dir) / "checkpoints";
  json listing = json::object();
  for (const auto& [file, crc] : checksums) listing[file] = crc;
  write_file_atomic((temp / kCheckpointChecksumFile).string(), listing.dump(2) + "\n");
  sync_directory(temp.string());

  const std::string name = "step_" + std::to_string(step);
  const fs::path final_dir = root / name;
  if (fs::exists(final_dir)) {
    // Left by an earlier life of the run (resume chose an older checkpoint, so this one did not verify):
    // set aside, not deleted.
    const fs::path aside = root / cat(name, ".replaced-", std::time(nullptr));
    fs::rename(final_dir, aside);
    std::fprintf(stderr, "zaya: %s already existed; kept as %s\n", final_dir.c_str(), aside.c_str());
  }
  fs::rename(temp, final_dir);
  sync_directory(root.string());
  write_file_atomic((root / kLatest).string(), name + "\n");

  // Rotation: the newest `keep` up to this step stay. Newer ones are not this run's to delete, nor is a step
  // directory holding anything zaya did not write there.
  int kept = 0;
  for (const auto& [other, path] : step_directories(root)) {
    if (other > step || ++kept <= keep) continue;
    if (only_checkpoint_files(path)) {
      fs::remove_all(path);
    } else {
      std::fprintf(stderr, "zaya: %s holds files zaya did not write; left in place by the rotation\n",
                   path.c_str());
    }
  }
}

void verify_checkpoint(const std::string& checkpoint_dir) {
  const fs::path dir(checkpoint_dir);
  const std::string listing = (dir / kCheckpointChecksumFile).string();
  const json checksums = parse_json(read_text_file(listing), listing);
  for (const char* required : {"config.json", kCheckpointStateFile}) {
    if (!checksums.contains(required)) throw Error(std::string("does not list ") + required).file(listing);
  }
  if (optimizer_files(checksums).empty()) throw Error("lists no optimizer state").file(listing);
  for (const auto& [file, want] : checksums.items()) {
    const std::string path = (dir / file).string();
    if (!fs::exists(path)) throw Error("missing").file(path);
    if (!want.is_string() || file_checksum(path) != want.get<std::string>())
      throw Error("checksum mismatch").file(path);
  }
  // The state is consistent: a step directory holds that step (not, say, a copy of another), and the data
  // position adds up (the loader would otherwise seek for ever to a window past its data).
  const std::string state_path = (dir / kCheckpointStateFile).string();
  try {
    const json state = parse_json(read_text_file(state_path), state_path);
    const int64_t held = json_int64(state.at("step"), state_path, "step");
    if (const int64_t step = step_of(dir); step >= 0 && held != step)
      throw Error(cat("holds step ", held, ", not ", step)).file(state_path);
    LoaderState loader;
    loader.samples = json_int64(state.at("loader").at("samples"), state_path, "loader.samples");
    loader.drawn = json_int64_array(state.at("loader").at("drawn"), state_path, "loader.drawn");
    if (!loader.consistent()) {
      throw Error(cat("the data position is inconsistent: ", loader.samples, " samples drawn as ",
                      state.at("loader").at("drawn").dump()))
          .file(state_path)
          .field("loader");
    }
  } catch (const json::exception& e) {
    throw Error(std::string("malformed: ") + e.what()).file(state_path);
  }
}

CheckpointChoice choose_checkpoint(const std::string& run_dir) {
  const fs::path root = fs::path(run_dir) / "checkpoints";
  if (!fs::is_directory(root)) return {};
  CheckpointChoice choice;
  for (const auto& [step, path] : step_directories(root)) {
    try {
      verify_checkpoint(path.string());
      choice.path = path.string();
      break;
    } catch (const Error& e) {
      std::fprintf(stderr, "zaya: checkpoint %s is damaged (%s); trying the one before it\n", path.c_str(),
                   e.what());
    }
  }
  if (choice.path.empty()) return choice;
  // A directory is published by a rename once complete, then named in `latest`: `latest` can lag (a run
  // stopped between the two) or be damaged, so it is only compared with what the checkpoints say.
  const std::string chosen = fs::path(choice.path).filename().string();
  const fs::path latest_path = root / kLatest;
  std::error_code ignored;
  std::string latest;
  if (fs::exists(latest_path, ignored)) {
    try {
      latest = read_text_file(latest_path.string());
      latest.erase(latest.find_last_not_of(" \n\r\t") + 1);
    } catch (const Error&) {
      latest.clear();
    }
  }
  if (latest == chosen) {
    choice.reason = "the newest intact checkpoint, as checkpoints/latest says";
  } else if (!fs::exists(latest_path, ignored)) {
    choice.reason = "the newest intact checkpoint; checkpoints/latest is missing";
  } else if (step_of(root / latest) < 0) {
    choice.reason = "the newest intact checkpoint; checkpoints/latest names no checkpoint (damaged?)";
  } else if (step_of(root / latest) < step_of(choice.path)) {
    choice.reason = cat("the newest intact checkpoint; checkpoints/latest still names the older ", latest,
                        " (a run stopped before updating it)");
  } else {
    choice.reason = cat("the newest intact checkpoint; checkpoints/latest names ", latest,
                        ", which is missing or damaged");
  }
  return choice;
}

std::string find_checkpoint(const std::string& run_dir) {
  return choose_checkpoint(run_dir).path;
}

std::vector<std::string> listed_optimizer_shards(const std::string& checkpoint_dir) {
  const std::string listing = (fs::path(checkpoint_dir) / kCheckpointChecksumFile).string();
  return optimizer_files(parse_json(read_text_file(listing), listing));
}

}  // namespace zaya
