# Unit tests of the tokenizer, added to zaya_unit_tests.
target_sources(zaya_unit_tests PRIVATE
  ${CMAKE_CURRENT_SOURCE_DIR}/unit/bpe_trainer_test.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/unit/tokenizer_reference_test.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/unit/tokenizer_regex_test.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/unit/tokenizer_test.cpp
)

# Against the live `tokenizers` library: a tokenizer trained by `zaya tokenizer train` encodes identically
# there; skipped where tools/reference/.venv does not exist.
add_test(NAME peer_tokenizer
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/peer/run_peer.sh ${CMAKE_CURRENT_SOURCE_DIR}/peer/tokenizer_peer.py
                 $<TARGET_FILE:zaya> ${CMAKE_CURRENT_SOURCE_DIR}/fixtures/tokenizer)
set_tests_properties(peer_tokenizer PROPERTIES LABELS peer SKIP_RETURN_CODE 77 TIMEOUT 600)

# `zaya tokenizer` from the command line: train, encode, decode, bench, exit codes and errors.
add_test(NAME tokenizer_cli
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/integration/tokenizer_cli_test.sh $<TARGET_FILE:zaya>
                 ${CMAKE_CURRENT_SOURCE_DIR}/fixtures)
set_tests_properties(tokenizer_cli PROPERTIES LABELS integration)
