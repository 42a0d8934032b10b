#pragma once
// One error type for everything a user can get wrong: files, configs, flags, data. It carries where the
// problem is (file, tensor, field) so the command line can print it as a single line.

#include <sstream>
#include <stdexcept>
#include <string>

namespace zaya {

class Error : public std::runtime_error {
 public:
  explicit Error(std::string message);

  // Each setter returns *this so a throw site reads: throw Error("...").file(path).tensor(name);
  Error& file(std::string path);
  Error& tensor(std::string name);
  Error& field(std::string name);

  const std::string& message() const { return message_; }
  const std::string& file_name() const { return file_; }
  const char* what() const noexcept override { return full_.c_str(); }

 private:
  void compose();

  std::string message_, file_, tensor_, field_, full_;
};

// Concatenates anything streamable into a string: cat("layer ", i, " has ", n, " heads").
template <class... Args>
std::string cat(const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}

}  // namespace zaya
