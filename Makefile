# The two commands of README.md, and a few more for development.
#   make demo   install what is missing, build, run a 4-rank job on a private daemon
#   make test   install what is missing, build, run the whole test suite
#               (then make sanitize and make fuzz: what CI runs)
BUILD_DIR ?= build
BUILD_TYPE ?= RelWithDebInfo
JOBS ?= $(shell nproc)
# make install / make uninstall (as root for system prefixes)
PREFIX ?= /usr/local

.PHONY: demo test build deps bench format clean install uninstall sanitize fuzz \
	fuzz-corpus

demo: build
	./scripts/demo.sh

test: build
	./scripts/run-tests.sh $(BUILD_DIR)
	$(MAKE) sanitize
	$(MAKE) fuzz

# The unit tests under ASan+UBSan (build-asan) and the threaded parts' tests
# under TSan (build-tsan); README "Testing".
sanitize: deps
	JOBS=$(JOBS) ./scripts/run-sanitizers.sh

# The libFuzzer targets (tests/fuzz), built with clang in build-fuzz, each
# run for FUZZ_SECONDS from its seed corpus. For a release:
# make fuzz FUZZ_SECONDS=1800.
FUZZ_SECONDS ?= 30
fuzz: deps
	JOBS=$(JOBS) ./scripts/run-fuzz.sh $(FUZZ_SECONDS)

# Writes tests/fuzz/corpus/ afresh from valid messages (after a change to a
# target's input form or to the messages).
fuzz-corpus: deps
	JOBS=$(JOBS) ./scripts/run-fuzz.sh 0
	rm -rf tests/fuzz/corpus
	build-fuzz/fuzz/fuzz-seed-corpus tests/fuzz/corpus

build: deps
	@cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) >/dev/null
	cmake --build $(BUILD_DIR) -j $(JOBS)

# TensorFlow is not in Debian: the pinned one of scripts/tensorflow-requirements.txt
# goes into $(BUILD_DIR)/tf-venv (once; downloads are cached in ~/.cache/pip).
deps:
	@./scripts/install-deps.sh
	@./scripts/tensorflow-venv.sh $(BUILD_DIR)

# The performance report of the foundation issue: collectived against plain
# MPI_Allreduce with the same processes.
bench: build
	$(BUILD_DIR)/bin/collective-bench --clients 4 --compare mpi

# Binaries, configuration, man pages, the systemd unit and its sysusers.d
# file, libcollective and its headers; see "Running in production" in
# README.md. DESTDIR is honoured. Build first, as yourself: `make build &&
# sudo make install` (so that build/ stays yours).
install:
	cmake --install $(BUILD_DIR) --prefix $(PREFIX)

# Removes what `make install` put under PREFIX (its manifests there say
# what), except the live configuration in etc/collectived.
uninstall:
	cmake -DPREFIX=$(PREFIX) -P cmake/Uninstall.cmake

format:
	git ls-files '*.h' '*.cc' '*.c' | xargs clang-format -i

clean:
	rm -rf $(BUILD_DIR) build-asan build-tsan build-fuzz
