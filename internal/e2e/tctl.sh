#!/usr/bin/env bash
# tctl.sh — prints the path of tctl $TCTL_VERSION (default v1.18.0), the
# Temporal CLI's 1.x predecessor that TestTctlDrivesDev drives, building it
# once per machine into the Go path (beside the linters the Makefile caches
# there). It is built in a module of its own, outside the repository: tctl's
# module requires an old Temporal server and SDK, and `go install …@version`
# would also ask the module proxy for tctl's version list, which some proxies
# refuse. Cold (empty module and build caches) it downloads about 1.4 GB of
# modules and compiles for about 160 CPU-seconds.
set -euo pipefail
version=${TCTL_VERSION:-v1.18.0}
dir=$(go env GOPATH)/pkg/fastagent-tools/tctl-$version
bin=$dir/tctl
mkdir -p "$dir"
if command -v flock >/dev/null; then
	exec 9>"$dir/.lock"
	flock 9 # one build at a time; a second caller finds it built
fi
if [ ! -x "$bin" ]; then
	mod=$(mktemp -d)
	gobin=$(mktemp -d "$dir/.build-XXXXXX")
	trap 'rm -rf "$mod" "$gobin"' EXIT
	printf 'module fastagent.local/tctl-build\n\ngo 1.19\n\nrequire github.com/temporalio/tctl %s\n' "$version" >"$mod/go.mod"
	echo "building tctl $version once into $dir (a few minutes on 2 cores)" >&2
	start=$(date +%s)
	(cd "$mod" && GOBIN=$gobin GOFLAGS=-mod=mod GOWORK=off go install -ldflags="-s -w" github.com/temporalio/tctl/cmd/tctl) >&2
	mv "$gobin/tctl" "$bin" # whole or absent
	echo "built tctl $version in $(($(date +%s) - start))s" >&2
fi
echo "$bin"
