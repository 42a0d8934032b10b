# Unit tests of the tokenizer, added to zaya_unit_tests.
target_sources(zaya_unit_tests PRIVATE)
