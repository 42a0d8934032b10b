#pragma once
// Every JSON document a user hands zaya (config.json, the safetensors index and headers, checkpoint files,
// JSON lines of a corpus) is parsed here, with a limit on its nesting: JSON is copied and printed by
// recursive code, which a document nested many thousands deep would run off the end of the stack. zaya's
// own formats nest 4 deep; real-world ones (tokenizer.json) under 10.

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace zaya {

inline constexpr int kMaxJsonDepth = 64;

// Parses text; throws Error naming `source` (and `where`, e.g. "line 12: ", before the message) when it is
// not valid JSON or nests deeper than kMaxJsonDepth. With duplicate_key, the first top-level key that
// appears twice is stored there (plain parsing keeps the last value silently).
nlohmann::json parse_json(std::string_view text, const std::string& source, const std::string& where = "",
                          std::string* duplicate_key = nullptr);

// The integer `value` (field `field` of file `source`): throws Error naming both unless it is an integer
// that int64 holds. nlohmann's get<int64_t> would cast a float, or a literal too long for 64 bits (which
// it parses as a float): undefined behaviour past int64's range, a silent truncation within it.
int64_t json_int64(const nlohmann::json& value, const std::string& source, const std::string& field);
// The same for an array of them.
std::vector<int64_t> json_int64_array(const nlohmann::json& value, const std::string& source,
                                      const std::string& field);

}  // namespace zaya
