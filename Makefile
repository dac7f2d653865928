# Koi's entry points. Every target installs its own Debian packages first.
#   make run        the main job (see README.md)
#   make test       the default test tier: unit + integration (what CI runs)
#   make test-all   every tier, including slow suites, bounded fuzzing and the ASan tier
#   make check-asan unit tests under AddressSanitizer + UndefinedBehaviorSanitizer
#   make check-tsan unit tests under ThreadSanitizer
#   make bench      builds the benchmarks (see bench/README.md for how to run each)
BUILD ?= build
JOBS ?= $(shell nproc)
SHARED ?= $(abspath ../shared)
CMAKE_FLAGS ?=

.PHONY: all deps test-deps build run test test-all check-asan check-tsan bench clean

all: build

deps:
	@scripts/install-deps

test-deps:
	@scripts/install-deps --test

$(BUILD)/build.ninja:
	cmake -S . -B $(BUILD) -G Ninja -DKOI_SHARED_DIR=$(SHARED) $(CMAKE_FLAGS)

build: deps $(BUILD)/build.ninja
	cmake --build $(BUILD) -j $(JOBS)

run: build
	@KOI=$(BUILD)/koi scripts/run-main

test: test-deps build
	cd $(BUILD) && ctest -L 'unit|integration' --output-on-failure -j $(JOBS)

test-all: test-deps build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)
	@scripts/run-fuzzers
	$(MAKE) check-asan

check-asan: test-deps
	cmake -S . -B build-asan -G Ninja -DKOI_ASAN=ON -DKOI_UBSAN=ON -DKOI_SHARED_DIR=$(SHARED)
	cmake --build build-asan -j $(JOBS)
	cd build-asan && ctest -L unit --output-on-failure -j $(JOBS)

check-tsan: test-deps
	cmake -S . -B build-tsan -G Ninja -DKOI_TSAN=ON -DKOI_SHARED_DIR=$(SHARED)
	cmake --build build-tsan -j $(JOBS)
	cd build-tsan && ctest -L unit --output-on-failure -j $(JOBS)

bench: build
	cmake --build $(BUILD) -j $(JOBS) --target benchmarks

clean:
	rm -rf $(BUILD) build-asan build-tsan build-fuzz
