#!/usr/bin/env bash
# Runs gotune's checks: formatting, go vet, staticcheck, then every test,
# with the race detector on the packages that run goroutines. Set
# GOTUNE_CI=1 to make the tests that need system packages (PyTorch,
# Chromium) fail instead of skip when those are missing.
set -euo pipefail
cd "$(dirname "$0")/.."
# go-nvml's cgo preamble names NVML functions the header marks deprecated;
# keep the compiler's defaults and silence those warnings.
case "${CGO_CFLAGS:-}" in
*-Wno-deprecated-declarations*) ;;
*) export CGO_CFLAGS="${CGO_CFLAGS:--O2 -g} -Wno-deprecated-declarations" ;;
esac

unformatted=$(gofmt -l .)
if [ -n "$unformatted" ]; then
	echo "gofmt would change:"; echo "$unformatted"; exit 1
fi
go vet ./...
# staticcheck at a pinned version, fetched through the module proxy.
go run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...

# Packages with concurrency run under -race; the rest run plain. Both sets
# run even when the first fails, so one run reports every failure.
race_pkgs='/(allreduce|cluster|dashboard|mlflow|schedulers|search|storage|trainer|tuner|workers)(/|$)'
status=0
go test -race -timeout 20m $(go list ./... | grep -E "$race_pkgs") || status=1
go test -timeout 20m $(go list ./... | grep -vE "$race_pkgs") || status=1
exit $status
