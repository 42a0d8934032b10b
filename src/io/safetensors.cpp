#include "io/safetensors.h"

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/atomic_file.h"
#include "io/json_input.h"

namespace zaya {
namespace {

using nlohmann::json;

// The safetensors library refuses headers above 100 MB; so do we, before parsing anything.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

uint64_t read_u64_le(const unsigned char* bytes) {
  uint64_t value = 0;
  for (int i = 7; i >= 0; --i) value = (value << 8) | bytes[i];
  return value;
}

// Parses the header, rejecting a tensor name that appears twice (plain parsing keeps the last silently).
json parse_header_json(std::string_view header, const std::string& path) {
  std::string duplicate;
  json parsed = parse_json(header, path, "header: ", &duplicate);
  if (!duplicate.empty()) throw Error("tensor appears twice in the header").file(path).tensor(duplicate);
  if (!parsed.is_object()) throw Error("header is not a JSON object").file(path);
  return parsed;
}

}  // namespace

SafetensorsFile::SafetensorsFile(const std::string& path) : file_(path) {
  if (file_.size() < 8) {
    throw Error(cat("file is ", file_.size(), " bytes, too short for a safetensors header")).file(path);
  }
  const uint64_t header_bytes = read_u64_le(file_.data());
  if (header_bytes > file_.size() - 8) {
    throw Error(cat("header length ", header_bytes, " exceeds the ", file_.size() - 8, " bytes after it"))
        .file(path);
  }
  if (header_bytes > kMaxHeaderBytes) {
    throw Error(cat("header length ", header_bytes, " is above the 100 MB limit")).file(path);
  }
  data_start_ = 8 + header_bytes;
  parse_header({reinterpret_cast<const char*>(file_.data() + 8), header_bytes}, file_.size() - data_start_);
}

void SafetensorsFile::parse_header(std::string_view header, size_t data_size) {
  const std::string& file = path();
  const json parsed = parse_header_json(header, file);
  for (const auto& [name, value] : parsed.items()) {
    if (name == "__metadata__") {
      if (!value.is_object()) throw Error("__metadata__ is not an object").file(file);
      for (const auto& [key, text] : value.items()) {
        if (!text.is_string()) throw Error("metadata values must be strings").file(file).field(key);
        metadata_[key] = text.get<std::string>();
      }
      continue;
    }
    auto fail = [&, &name = name](const std::string& message) {
      return Error(message).file(file).tensor(name);
    };
    if (!value.is_object()) throw fail("entry is not an object");
    for (const auto& [key, unused] : value.items()) {
      if (key != "dtype" && key != "shape" && key != "data_offsets") throw fail("unknown key '" + key + "'");
    }
    if (!value.contains("dtype") || !value["dtype"].is_string()) throw fail("missing or non-string dtype");
    const auto dtype = dtype_from_name(value["dtype"].get<std::string>());
    if (!dtype) throw fail("unknown dtype '" + value["dtype"].get<std::string>() + "'");

    SafetensorsEntry entry{name, *dtype, {}, 0, 0};
    if (!value.contains("shape") || !value["shape"].is_array()) throw fail("missing or non-array shape");
    if (value["shape"].size() > size_t(Shape::kMaxRank)) throw fail("shape has too many dimensions");
    uint64_t bytes = dtype_size(*dtype);
    for (const json& dim : value["shape"]) {
      if (!dim.is_number_unsigned()) throw fail("shape holds a value that is not a non-negative integer");
      const uint64_t extent = dim.get<uint64_t>();
      if (extent > uint64_t(INT64_MAX) || __builtin_mul_overflow(bytes, extent, &bytes)) {
        throw fail("shape " + value["shape"].dump() + " overflows");
      }
      entry.shape.push_back(int64_t(extent));
    }

    const json& offsets = value.contains("data_offsets") ? value["data_offsets"] : json();
    if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
        !offsets[1].is_number_unsigned()) {
      throw fail("data_offsets must be two non-negative integers");
    }
    const uint64_t begin = offsets[0].get<uint64_t>(), end = offsets[1].get<uint64_t>();
    if (begin > end) throw fail(cat("data_offsets [", begin, ", ", end, "] are reversed"));
    if (end > data_size)
      throw fail(cat("data_offsets end ", end, " is past the ", data_size, "-byte data section"));
    if (end - begin != bytes) {
      throw fail(cat("shape ", entry.shape.to_string(), " of ", value["dtype"].get<std::string>(), " needs ",
                     bytes, " bytes but data_offsets span ", end - begin));
    }
    entry.begin = begin;
    entry.end = end;
    entries_.push_back(std::move(entry));
  }

  // The data section must be covered exactly: no overlaps, no holes, nothing after the last tensor.
  std::sort(entries_.begin(), entries_.end(), [](const auto& a, const auto& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  size_t cursor = 0;
  for (const SafetensorsEntry& entry : entries_) {
    if (entry.begin < cursor)
      throw Error("data overlaps the previous tensor's").file(file).tensor(entry.name);
    if (entry.begin > cursor)
      throw Error(cat("hole in the data section before byte ", entry.begin)).file(file).tensor(entry.name);
    cursor = entry.end;
  }
  if (cursor != data_size) {
    throw Error(cat("data section is ", data_size, " bytes but the tensors cover ", cursor)).file(file);
  }
  for (size_t i = 0; i < entries_.size(); ++i) index_[entries_[i].name] = i;
}

const SafetensorsEntry* SafetensorsFile::find(std::string_view name) const {
  const auto it = index_.find(name);
  return it == index_.end() ? nullptr : &entries_[it->second];
}

TensorView SafetensorsFile::view(const SafetensorsEntry& entry) const {
  return {const_cast<unsigned char*>(file_.data() + data_start_ + entry.begin), entry.dtype, entry.shape};
}

void SafetensorsFile::drop_pages(const SafetensorsEntry& entry) const {
  file_.drop_pages(data_start_ + entry.begin, entry.end - entry.begin);
}

void SafetensorsWriter::add(std::string name, const TensorView& view) {
  if (name == "__metadata__") throw Error("'__metadata__' cannot name a tensor");
  for (const auto& [existing, unused] : tensors_) {
    if (existing == name) throw Error("tensor added twice").tensor(name);
  }
  data_bytes_ += view.nbytes();
  tensors_.emplace_back(std::move(name), view);
}

void SafetensorsWriter::write(const std::string& path) const {
  json header = json::object();
  if (!metadata_.empty()) header["__metadata__"] = metadata_;
  size_t offset = 0;
  for (const auto& [name, view] : tensors_) {
    json shape = json::array();
    for (int axis = 0; axis < view.shape.rank(); ++axis) shape.push_back(view.shape[axis]);
    header[name] = {{"dtype", dtype_name(view.dtype)},
                    {"shape", shape},
                    {"data_offsets", {offset, offset + view.nbytes()}}};
    offset += view.nbytes();
  }
  std::string text = header.dump();
  text.resize(align_up(text.size(), 8), ' ');  // keeps the data section 8-byte aligned, as the reference does

  unsigned char length[8];
  for (int i = 0; i < 8; ++i) length[i] = (uint64_t(text.size()) >> (8 * i)) & 0xff;
  AtomicFileWriter out(path);
  out.write(length, sizeof length);
  out.write(text);
  for (const auto& [name, view] : tensors_) out.write(view.data, view.nbytes());
  out.commit();
}

}  // namespace zaya
