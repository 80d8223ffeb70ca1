# Kiln: `make demo` and `make test` each install dependencies, configure, build, then run.
BUILD_DIR ?= build
BUILD_TYPE ?= RelWithDebInfo
JOBS ?= $(shell nproc)

.PHONY: all deps configure build test demo farm-demo bench clean

all: build

deps:
	bash scripts/install-deps.sh

configure: deps
	@if [ ! -f $(BUILD_DIR)/build.ninja ]; then \
	  cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE); \
	fi

build: configure
	cmake --build $(BUILD_DIR) -j $(JOBS)

test: build
	cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS) --timeout 600

demo: build
	bash scripts/demo.sh $(BUILD_DIR)

# A farm on loopback: a throwaway PostgreSQL, 2 replicas, 2 workers (README "Jobs on a farm").
farm-demo: build
	bash scripts/farm-demo.sh $(BUILD_DIR)

bench: build
	bash scripts/bench.sh $(BUILD_DIR)

clean:
	rm -rf $(BUILD_DIR)

# Container image (docker when a daemon answers, else buildah): scripts/image.sh, image-test.sh.
.PHONY: image image-test
image:
	bash scripts/image.sh

image-test: configure
	cmake --build $(BUILD_DIR) -j $(JOBS) --target kiln
	KILN_CLI=$(BUILD_DIR)/cli/kiln bash scripts/image-test.sh
