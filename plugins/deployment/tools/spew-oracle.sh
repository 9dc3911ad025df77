#!/usr/bin/env bash
# Run tools/spew-oracle (KCM v1.20's template printing and hash) on stdin's templates, one JSON
# object per line, against a kubernetes v1.20.2 source tree, without writing into it: a private
# GOPATH links the tree's vendor/ and staging/ next to the oracle.
#
#   tools/spew-oracle.sh KUBERNETES_SOURCE_ROOT < templates.jsonl > golden.jsonl
#
# Needs Go (scripts/control-plane.sh build installs golang-1.19).
set -euo pipefail
src=$(cd "${1:?usage: $0 KUBERNETES_SOURCE_ROOT}" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
work=${SPEW_ORACLE_WORK:-${TMPDIR:-/tmp}/spew-oracle-gopath}
mkdir -p "$work/src/k8s.io/kubernetes"
ln -sfn "$src/vendor" "$work/src/k8s.io/kubernetes/vendor"
ln -sfn "$src/staging" "$work/src/k8s.io/kubernetes/staging"
rm -rf "$work/src/k8s.io/kubernetes/spew-oracle"
cp -r "$here/spew-oracle" "$work/src/k8s.io/kubernetes/spew-oracle"
export PATH=/usr/lib/go-1.19/bin:$PATH GOPATH=$work GO111MODULE=off GOFLAGS= GOCACHE=$work/cache
cd "$work/src/k8s.io/kubernetes/spew-oracle"
go run .
