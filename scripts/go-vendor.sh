#!/usr/bin/env bash
# Builds clients/go/vendor/ from Debian's Go sources under /usr/share/gocode
# (golang-github-gomodule-redigo-dev, golang-github-mna-redisc-dev; `scripts/setup.sh go redigo
# redisc` installs them), so that `go` builds the package offline with GOFLAGS=-mod=vendor
# GOPROXY=off: no Go module proxy is needed. It also makes the same sources two modules,
# clients/go/third_party/redigo and .../redisc, each with a go.mod requiring only what its
# code imports (redigo's own go.mod requires testify, for its tests), for a user's program to
# `replace` them with offline (clients/go/README.md, "Install"). git ignores both.
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

# The modules for users' programs: the vendored packages under their module's root.
third=third_party.tmp
rm -rf "$third"
mkdir -p "$third/redigo" "$third/redisc"
cp -r vendor/github.com/gomodule/redigo/redis "$third/redigo/"
cp vendor/github.com/mna/redisc/*.go "$third/redisc/"
printf 'module github.com/gomodule/redigo\n\ngo 1.14\n' >"$third/redigo/go.mod"
printf 'module github.com/mna/redisc\n\ngo 1.14\n\nrequire github.com/gomodule/redigo %s\n' \
    "$(version github.com/gomodule/redigo)" >"$third/redisc/go.mod"
rm -rf third_party
mv "$third" third_party
