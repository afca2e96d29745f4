# dormouse — the two commands of the README drive CMake:
#   make run    install missing Debian packages, build, train the default model on the
#               bundled corpus, evaluate, draw its curves, and print a sample
#   make test   install missing Debian packages, build, run every test (CTest)
# Also: make build | make asan (tests under ASan+UBSan) | make clean
#       make bench (every benchmark; rows appended to benches/history.tsv)
#       make bench-data (a generated 16 GiB corpus: prepare vs dd, the first step, RSS and
#         step time against the bundled corpus, the evaluation's bytes/s; scripts/bench_data.sh;
#         I/O heavy, ~40 GB, about 26 minutes on 2 cores)
#       make bench-drift (a trained model's step against its step at init, denormals flushed
#         and kept: scripts/bench_drift.sh; trains 500 steps first, minutes on 2 cores)
#       make install [PREFIX=/usr/local] (bin/dormouse, lib/libdormouse.a, include/dormouse.h,
#         lib/pkgconfig/dormouse.pc, share/dormouse/: the corpus, the PyTorch twin; with
#         CUDA, lib/dormouse/libdormouse-cuda.so: docs/cuda.md)
#       make uninstall (what the last install wrote)
#       make fuzz (each libFuzzer harness of fuzz/ for FUZZ_SECONDS, default 60; clang)
#       make crashtest (the kill -9 crash test, long: CRASHTEST_KILLS, default 270)
BUILD ?= build
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
PREFIX ?= /usr/local
CMAKE_FLAGS ?=

FUZZ_SECONDS ?= 60
CRASHTEST_KILLS ?= 270

.PHONY: all deps deps-test build run test asan bench bench-data bench-drift fuzz crashtest clean install uninstall
all: build

deps:
	@bash scripts/deps.sh

deps-test:
	@bash scripts/deps.sh --test

build: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

test: deps-test build
	@bash scripts/test_gate.sh $(BUILD) $(JOBS)

asan: deps-test
	@cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DDM_SANITIZE=ON -DDM_NATIVE=OFF >/dev/null
	@cmake --build build-asan -j $(JOBS)
	@bash scripts/test_gate.sh build-asan $(JOBS)

# make run needs the command only: built quietly, with a progress line (scripts/build_quiet.sh)
run: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS) >/dev/null
	@bash scripts/build_quiet.sh $(BUILD) $(JOBS) dormouse_cli
	@bash scripts/run_default.sh $(BUILD)

install: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX=$(PREFIX) $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)
	@cmake --install $(BUILD)
	@echo "installed: $(PREFIX)/bin/dormouse (run \`dormouse --help\`; add $(PREFIX)/bin to PATH if it is not there)"

uninstall:
	@test -f $(BUILD)/install_manifest.txt || { echo "nothing to uninstall: no $(BUILD)/install_manifest.txt" >&2; exit 1; }
	@xargs rm -fv < $(BUILD)/install_manifest.txt

bench: build
	@bash scripts/bench_all.sh $(BUILD)

bench-data: build
	@bash scripts/bench_data.sh $(BUILD)

bench-drift: build
	@bash scripts/bench_drift.sh $(BUILD)

fuzz: deps
	@FUZZ_SECONDS=$(FUZZ_SECONDS) bash scripts/fuzz.sh

crashtest: build
	@DM_CRASHTEST_KILLS=$(CRASHTEST_KILLS) $(BUILD)/test_crash crash_kill9_resume_exact

clean:
	rm -rf $(BUILD) build-asan build-fuzz
