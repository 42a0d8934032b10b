# Sources of the tokenizer (src/data/tokenizer*), added to zaya_lib.
target_sources(zaya_lib PRIVATE)
