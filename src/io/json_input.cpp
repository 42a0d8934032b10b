#include "io/json_input.h"

#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"

namespace zaya {

namespace {
struct TooDeep {};
}  // namespace

nlohmann::json parse_json(std::string_view text, const std::string& source, const std::string& where,
                          std::string* duplicate_key) {
  using json = nlohmann::json;
  std::set<std::string> keys;
  // The parser itself walks any nesting without recursion; the limit stops it at the first value too deep.
  auto limit = [&](int depth, json::parse_event_t event, json& parsed) {
    if (depth >= kMaxJsonDepth &&
        (event == json::parse_event_t::object_start || event == json::parse_event_t::array_start))
      throw TooDeep{};
    if (duplicate_key && depth == 1 && event == json::parse_event_t::key && duplicate_key->empty() &&
        !keys.insert(parsed.get<std::string>()).second)
      *duplicate_key = parsed.get<std::string>();
    return true;
  };
  try {
    return json::parse(text.begin(), text.end(), limit);
  } catch (const json::exception& e) {
    throw Error(cat(where, "not valid JSON: ", e.what())).file(source);
  } catch (const TooDeep&) {
    throw Error(cat(where, "JSON nested deeper than ", kMaxJsonDepth, " levels")).file(source);
  }
}

}  // namespace zaya
