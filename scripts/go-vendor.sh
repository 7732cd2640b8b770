#!/usr/bin/env bash
# Builds clients/go/vendor/ from Debian's Go sources under /usr/share/gocode
# (golang-github-gomodule-redigo-dev, golang-github-mna-redisc-dev; `scripts/setup.sh go redigo
# redisc` installs them), so that `go` builds the package offline with GOFLAGS=-mod=vendor
# GOPROXY=off: no Go module proxy is needed. git ignores vendor/.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../clients/go"
src=${GOCODE:-/usr/share/gocode/src}
tmp=vendor.tmp
rm -rf "$tmp"
mkdir -p "$tmp"

# A package's own files, without its tests.
package() {
    mkdir -p "$tmp/$1"
    find "$src/$1" -maxdepth 1 -name '*.go' ! -name '*_test.go' -exec cp {} "$tmp/$1/" \;
}

# The versions go.mod requires; Debian bookworm ships exactly these.
version() {
    sed -n "s|^[[:space:]]*$1 \(v[^ ]*\)$|\1|p" go.mod
}

package github.com/gomodule/redigo/redis
package github.com/mna/redisc
cat >"$tmp/modules.txt" <<TXT
# github.com/gomodule/redigo $(version github.com/gomodule/redigo)
## explicit; go 1.14
github.com/gomodule/redigo/redis
# github.com/mna/redisc $(version github.com/mna/redisc)
## explicit
github.com/mna/redisc
TXT
rm -rf vendor
mv "$tmp" vendor
