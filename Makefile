# vkrt — common tasks. `make help` lists them.
GO ?= go
BIN := bin

.PHONY: help demo test build vkrt examples fuzz bench clean report pictures figures

# Each examples/NAME/main.go is a guest, built into examples/NAME.wasm.
EXAMPLES := $(patsubst examples/%/main.go,%,$(wildcard examples/*/main.go))

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-8s %s\n", $$1, $$2}'

# The install comes first: built without a C compiler, vkrt would have no
# Vulkan backend (the go command turns cgo off where it finds none).
demo: ## the main job: dry-run a transformer guest, plan its pools, run it for real under the plan
	bash ci/install.sh runtime
	$(MAKE) --no-print-directory vkrt examples
	./$(BIN)/vkrt plan --verify examples/transformer.wasm

test: ## install what is missing, then run every check and test (what CI runs)
	bash ci/test.sh

build: ## build every package
	$(GO) build ./...

vkrt: ## build the command line into bin/vkrt
	$(GO) build -o $(BIN)/vkrt ./cmd/vkrt

examples: ## build the example guests into examples/*.wasm (GOOS=wasip1 GOARCH=wasm)
	$(foreach e,$(EXAMPLES),GOOS=wasip1 GOARCH=wasm $(GO) build -o examples/$(e).wasm ./examples/$(e) &&) true

report: vkrt ## chart the shipped traces' pools, default layout against plan, into bin/report.html
	./$(BIN)/vkrt report --html $(BIN)/report.html testdata/traces/*.trace.gz
	@echo "wrote $(BIN)/report.html"

CHROMIUM ?= chromium
pictures: vkrt ## redraw docs/report-llama_generate.png from the report page (needs chromium)
	./$(BIN)/vkrt report --html $(BIN)/report-llama_generate.html testdata/traces/llama_generate.trace.gz
	$(CHROMIUM) --headless --no-sandbox --disable-gpu --disable-background-networking --disable-component-update \
		--disable-sync --no-first-run --hide-scrollbars --disable-dev-shm-usage --force-color-profile=srgb --user-data-dir=$$(mktemp -d) \
		--window-size=1180,1080 --screenshot=docs/report-llama_generate.png file://$(CURDIR)/$(BIN)/report-llama_generate.html

figures: ## rewrite the README's measured plan table from `vkrt replay --plan --markdown`
	$(GO) test ./cmd/vkrt -run TestREADMEPlanTableIsTheCommandsOutput -count=1 -update

fuzz: ## fuzz every parser and the allocator, FUZZTIME each (default 30s), stopping at a failing input
	FUZZTIME=$(or $(FUZZTIME),30s) bash ci/fuzz.sh

bench: ## run the benchmarks
	$(GO) test -run '^$$' -bench . ./...

clean: ## remove build outputs
	rm -rf $(BIN) $(EXAMPLES:%=examples/%.wasm)
