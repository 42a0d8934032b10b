#include <gtest/gtest.h>

#include "core/error.h"

namespace zaya {
namespace {

TEST(Error, ComposesContextIntoOneLine) {
  const Error error = Error("bad\nthing").file("/tmp/x.safetensors").tensor("w").field("shape");
  EXPECT_STREQ(error.what(), "/tmp/x.safetensors: tensor 'w': field 'shape': bad thing");
  EXPECT_EQ(error.message(), "bad\nthing");
  EXPECT_EQ(error.file_name(), "/tmp/x.safetensors");
}

TEST(Error, KeepsTheContextThroughAThrow) {
  try {
    throw Error("oops").file("config.json").field("vocab_size");
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "config.json: field 'vocab_size': oops");
  }
}

TEST(Cat, ConcatenatesMixedValues) {
  EXPECT_EQ(cat("layer ", 3, " of ", 4.5, '!'), "layer 3 of 4.5!");
}

}  // namespace
}  // namespace zaya
