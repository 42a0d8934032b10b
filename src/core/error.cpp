#include "core/error.h"

namespace zaya {

Error::Error(std::string message) : std::runtime_error(""), message_(std::move(message)) {
  compose();
}

Error& Error::file(std::string path) {
  file_ = std::move(path);
  compose();
  return *this;
}

Error& Error::tensor(std::string name) {
  tensor_ = std::move(name);
  compose();
  return *this;
}

Error& Error::field(std::string name) {
  field_ = std::move(name);
  compose();
  return *this;
}

// "<file>: tensor '<t>': field '<f>': <message>", newlines folded so the result stays one line.
void Error::compose() {
  std::string out;
  if (!file_.empty()) out += file_ + ": ";
  if (!tensor_.empty()) out += "tensor '" + tensor_ + "': ";
  if (!field_.empty()) out += "field '" + field_ + "': ";
  out += message_;
  for (char& c : out) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  full_ = std::move(out);
}

}  // namespace zaya
