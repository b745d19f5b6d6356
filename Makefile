# vkrt — common tasks. `make help` lists them.
GO ?= go
BIN := bin

.PHONY: help demo test build vkrt fuzz bench clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-8s %s\n", $$1, $$2}'

demo: vkrt ## the main job: plan and replay a real model's allocation stream
	./$(BIN)/vkrt replay --plan testdata/traces/bert_dynamic.trace.gz

test: ## install what is missing, then run every check and test (what CI runs)
	bash ci/test.sh

build: ## build every package
	$(GO) build ./...

vkrt: ## build the command line into bin/vkrt
	$(GO) build -o $(BIN)/vkrt ./cmd/vkrt

bench: ## run the benchmarks
	$(GO) test -run '^$$' -bench . ./...

clean: ## remove build outputs
	rm -rf $(BIN)
