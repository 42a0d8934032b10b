# Sources of the tokenizer (src/data/tokenizer*, bpe_*, unicode_*), added to zaya_lib.
target_sources(zaya_lib PRIVATE
  ${CMAKE_CURRENT_SOURCE_DIR}/data/bpe_byte_level.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/data/bpe_model.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/data/bpe_token_table.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/data/bpe_trainer.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/data/tokenizer.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/data/tokenizer_added.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/data/tokenizer_decoder.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/data/tokenizer_document.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/data/tokenizer_json.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/data/tokenizer_known_regex.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/data/tokenizer_normalizer.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/data/tokenizer_pattern.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/data/tokenizer_pretokenizer.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/data/unicode_text.cpp
)
