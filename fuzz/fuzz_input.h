#pragma once
// What the fuzz targets share: a scratch directory of this process for the parsers that read files, and
// the rule that a parser may reject its input only by throwing zaya::Error (anything else, a crash or a
// sanitizer report, is a finding).

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

namespace zaya::fuzz {

// Writes bytes to NAME (a path relative to this process's scratch directory, its directories made) and
// returns its path.
std::string write_scratch(const std::string& name, std::string_view bytes);

// The input split at the first occurrence of a separator line ("\n----\n"): the part before, the part after
// ("" when there is none), so that one input can carry two files (a tokenizer and a text, an index and data).
std::pair<std::string_view, std::string_view> split_input(const uint8_t* data, size_t size);

}  // namespace zaya::fuzz
