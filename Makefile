# The two commands of README.md, and a few more for development.
#   make demo   install what is missing, build, run a 4-rank job on a private daemon
#   make test   install what is missing, build, run the whole test suite
BUILD_DIR ?= build
BUILD_TYPE ?= RelWithDebInfo
JOBS ?= $(shell nproc)

.PHONY: demo test build deps bench format clean

demo: build
	./scripts/demo.sh

test: build
	./scripts/run-tests.sh $(BUILD_DIR)

build: deps
	@cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) >/dev/null
	cmake --build $(BUILD_DIR) -j $(JOBS)

deps:
	@./scripts/install-deps.sh

# The performance report of the foundation issue: collectived against plain
# MPI_Allreduce with the same processes.
bench: build
	$(BUILD_DIR)/bin/collective-bench --clients 4 --compare mpi

format:
	git ls-files '*.h' '*.cc' '*.c' | xargs clang-format -i

clean:
	rm -rf $(BUILD_DIR)
