#pragma once
// Typed, checked reading of a toml++ table: each accessor consumes its key, finish() reports any key the
// reader did not consume, and every error names the file, the line and the dotted key.

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <toml++/toml.h>

namespace zaya {

class TomlReader {
 public:
  TomlReader(const toml::table* table, std::string path, const std::string* file);

  double number(const char* key, double fallback);
  int64_t integer(const char* key, int64_t fallback);
  int integer32(const char* key, int fallback);  // an integer that must fit an int (not cut to one)
  bool boolean(const char* key, bool fallback);
  std::string string(const char* key, const std::string& fallback);
  std::vector<double> numbers(const char* key, const std::vector<double>& fallback);
  std::vector<std::string> strings(const char* key, const std::vector<std::string>& fallback);
  bool has(const char* key) const;
  // A sub-table (empty when absent).
  TomlReader table(const char* key);
  // An array of tables (empty when absent).
  std::vector<TomlReader> tables(const char* key);
  // Keys of this table, for tables that are maps (a mixture: dataset -> weight).
  std::vector<std::string> keys() const;
  // Throws for keys that were not read.
  void finish() const;

  // An error about `key` of this table, naming the file and line.
  [[noreturn]] void fail(const std::string& key, const std::string& message) const;
  std::string dotted(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }

 private:
  const toml::node* get(const char* key);
  double finite(const char* key, double value) const;

  const toml::table* table_;
  std::string path_;
  const std::string* file_;
  std::set<std::string> read_;
};

// Parses TOML text and applies "dotted.key=value" overrides; throws Error naming the file and line (or the
// override: its values' source is "--set dotted.key").
toml::table parse_toml(std::string_view text, const std::string& source,
                       const std::vector<std::string>& overrides);

// Every value of a table under its dotted key ("stages.1.seq_len"), printed as TOML.
std::map<std::string, std::string> flatten_toml(const toml::table& table);

}  // namespace zaya
