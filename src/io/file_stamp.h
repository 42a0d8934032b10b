#pragma once
// What zaya keeps of a file it wrote, to tell later whether the file is still the one it wrote: its size and
// modification time (to the nanosecond). A file someone changed, replaced or copied since has another.

#include <cstdint>
#include <optional>
#include <string>

namespace zaya {

struct FileStamp {
  int64_t bytes = 0, modified_ns = 0;
  bool operator==(const FileStamp&) const = default;
};

// The stamp of a regular file (not followed through a link); nullopt for anything else or nothing.
std::optional<FileStamp> file_stamp(const std::string& path);

}  // namespace zaya
