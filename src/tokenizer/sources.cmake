# Sources of the tokenizer (src/tokenizer/): added to zaya_lib, and to the fuzz targets' parser library
# (fuzz/CMakeLists.txt), which leaves out the trainer (it needs OpenMP).
set(ZAYA_TOKENIZER_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/added.cpp
  ${CMAKE_CURRENT_LIST_DIR}/bpe_byte_level.cpp
  ${CMAKE_CURRENT_LIST_DIR}/bpe_model.cpp
  ${CMAKE_CURRENT_LIST_DIR}/bpe_token_table.cpp
  ${CMAKE_CURRENT_LIST_DIR}/decoder.cpp
  ${CMAKE_CURRENT_LIST_DIR}/document.cpp
  ${CMAKE_CURRENT_LIST_DIR}/json.cpp
  ${CMAKE_CURRENT_LIST_DIR}/known_regex.cpp
  ${CMAKE_CURRENT_LIST_DIR}/normalizer.cpp
  ${CMAKE_CURRENT_LIST_DIR}/pattern.cpp
  ${CMAKE_CURRENT_LIST_DIR}/pretokenizer.cpp
  ${CMAKE_CURRENT_LIST_DIR}/tokenizer.cpp
  ${CMAKE_CURRENT_LIST_DIR}/unicode_text.cpp
)
set(ZAYA_TOKENIZER_TRAINER_SOURCES ${CMAKE_CURRENT_LIST_DIR}/bpe_trainer.cpp)
