# The two quick-start commands (README): `make demo` and `make test`. Each installs what is missing,
# builds what is out of date, then runs. Nothing is reinstalled or rebuilt when up to date. Each step
# says its name first (`== zaya: ...`), and ninja counts the files it compiles ([N/M]), so the ~20 minutes
# from nothing never look hung. After changing this file, scripts/ or a CMake file, run the fresh-machine
# check (docs/CONTRIBUTING.md): CI's machine is already set up and cannot show a missing install step.

BUILD      ?= build
ASAN_BUILD ?= build-asan
FUZZ_BUILD ?= build-fuzz
JOBS       ?= $(shell nproc)
CMAKE_GEN  := -G Ninja
step        = @echo "== zaya: $(1)"

.PHONY: all deps build build-asan build-fuzz test test-fast fuzz fuzz-smoke demo format clean reference-fixtures

all: build

deps:
	$(call step,checking the Debian packages (scripts/setup.sh installs what is missing))
	@scripts/setup.sh
	@python3 scripts/fetch-cuda-binutils.py tools/cuda-binutils

$(BUILD)/build.ninja: | deps
	$(call step,configuring the release build in $(BUILD)/)
	cmake -S . -B $(BUILD) $(CMAKE_GEN) -DCMAKE_BUILD_TYPE=Release

$(ASAN_BUILD)/build.ninja: | deps
	$(call step,configuring the ASan + UBSan build in $(ASAN_BUILD)/)
	cmake -S . -B $(ASAN_BUILD) $(CMAKE_GEN) -DCMAKE_BUILD_TYPE=Debug -DZAYA_SANITIZE=ON -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g"

build: deps $(BUILD)/build.ninja
	$(call step,building the release build ($(BUILD)/; only what is out of date))
	@cmake --build $(BUILD) -j $(JOBS)

# The libFuzzer targets (fuzz/): a clang build of the parsers with coverage, ASan and UBSan.
$(FUZZ_BUILD)/build.ninja: | deps
	$(call step,configuring the fuzz targets in $(FUZZ_BUILD)/ (clang))
	cmake -S . -B $(FUZZ_BUILD) $(CMAKE_GEN) -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER=clang++ -DZAYA_FUZZ=ON

build-fuzz: deps $(FUZZ_BUILD)/build.ninja
	$(call step,building the fuzz targets ($(FUZZ_BUILD)/; only what is out of date))
	@cmake --build $(FUZZ_BUILD) -j $(JOBS)

build-asan: deps $(ASAN_BUILD)/build.ninja
	$(call step,building the unit tests and the emulated GPU tests under ASan + UBSan ($(ASAN_BUILD)/; only what is out of date))
	@cmake --build $(ASAN_BUILD) -j $(JOBS) --target zaya_unit_tests zaya_gpu_emulated_tests

# The whole suite: every test of the release build, then the unit tests again under ASan + UBSan.
test: build build-asan
	$(call step,testing the release build (unit, integration, and peer where tools/reference/.venv exists))
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)
	$(call step,testing the unit tests again under ASan + UBSan)
	cd $(ASAN_BUILD) && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
		ctest --output-on-failure -j $(JOBS) -L unit
	$(MAKE) --no-print-directory fuzz-smoke

# Every fuzz target a fixed 2000 executions from its seed corpus (part of make test), or 10 million each
# (FUZZ_RUNS=N to change; hours on two cores).
fuzz-smoke: build-fuzz
	$(call step,fuzzing each parser 2000 executions from its seed corpus under ASan + UBSan)
	@scripts/fuzz.sh smoke $(FUZZ_BUILD)

fuzz: build-fuzz
	$(call step,fuzzing each parser $${FUZZ_RUNS:-10000000} executions under ASan + UBSan)
	@scripts/fuzz.sh long $(FUZZ_BUILD)

test-fast: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

demo: build
	$(call step,the demo (scripts/demo.sh): tokenizer, data, training, export, a sample)
	@scripts/demo.sh $(BUILD)/src/zaya

format:
	clang-format -i $$(git ls-files '*.cpp' '*.h')

# Regenerates tests/fixtures/ from the reference implementation (needs PyPI; not part of `make test`).
reference-fixtures:
	tools/reference/setup_venv.sh
	for script in gen_io_fixtures gen_model_fixtures gen_train_fixtures gen_tokenizer_fixtures gen_data_fixtures; do \
		tools/reference/.venv/bin/python tools/reference/$$script.py || exit 1; done

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(FUZZ_BUILD)
