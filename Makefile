# vkrt — common tasks. `make help` lists them.
GO ?= go
BIN := bin

.PHONY: help demo test build vkrt examples fuzz bench clean

# Each examples/NAME/main.go is a guest, built into examples/NAME.wasm.
EXAMPLES := $(patsubst examples/%/main.go,%,$(wildcard examples/*/main.go))

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-8s %s\n", $$1, $$2}'

demo: vkrt examples ## the main job: dry-run a transformer guest, plan its pools, run it for real under the plan
	./$(BIN)/vkrt plan --verify examples/transformer.wasm

test: ## install what is missing, then run every check and test (what CI runs)
	bash ci/test.sh

build: ## build every package
	$(GO) build ./...

vkrt: ## build the command line into bin/vkrt
	$(GO) build -o $(BIN)/vkrt ./cmd/vkrt

examples: ## build the example guests into examples/*.wasm (GOOS=wasip1 GOARCH=wasm)
	$(foreach e,$(EXAMPLES),GOOS=wasip1 GOARCH=wasm $(GO) build -o examples/$(e).wasm ./examples/$(e) &&) true

bench: ## run the benchmarks
	$(GO) test -run '^$$' -bench . ./...

clean: ## remove build outputs
	rm -rf $(BIN) $(EXAMPLES:%=examples/%.wasm)
