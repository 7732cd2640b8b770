#!/usr/bin/env bash
# Stand-in bases for the module's images, made here from Debian since no image registry is
# reachable: one root filesystem (debootstrap --variant=minbase of this machine's Debian release,
# with Debian's redis-server and the valkey-server the test matrix uses, scripts/servers.sh
# valkey9), imported twice with `docker import` as the official images are laid out: entrypoint
# docker-entrypoint.sh (docker/standin/), CMD redis-server / valkey-server, WORKDIR and VOLUME
# /data, the redis / valkey user.
#
# The rootfs tarball is cached as target/images/standin-<key>.tar.gz, <key> a hash of this
# script, the entrypoint and the valkey binary; the images are tagged with the same key, so
# nothing is rebuilt while those stay the same. Prints two lines: the redis and valkey images.
# Needs root, debootstrap and a running dockerd (scripts/test-images.sh starts it).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/setup.sh debootstrap >&2
valkey=$(bash scripts/servers.sh valkey9 2>/dev/null | cut -f2)
entrypoint=docker/standin/docker-entrypoint.sh
key=$(cat "${BASH_SOURCE[0]}" "$entrypoint" "$valkey" | sha256sum | cut -c1-12)
cache=${CARGO_TARGET_DIR:-$PWD/target}/images
tarball=$cache/standin-$key.tar.gz
redis_image=slidingwindow-standin/redis:$key
valkey_image=slidingwindow-standin/valkey:$key

if [[ ! -f $tarball ]]; then
    # The mirror and release this machine's apt uses (deb822 sources or sources.list).
    . /etc/os-release
    mirror=$(sed -n 's/^URIs: *\([^ ]*\).*/\1/p' /etc/apt/sources.list.d/*.sources 2>/dev/null | grep -v security | sed -n 1p)
    [[ -n $mirror ]] || mirror=$(awk '$1 == "deb" && $2 !~ /security/ { print $2; exit }' /etc/apt/sources.list 2>/dev/null)
    [[ -n $mirror && -n ${VERSION_CODENAME:-} ]] || { echo "standin-base: no Debian mirror or release found in apt's sources" >&2; exit 1; }
    root=$cache/standin-rootfs
    rm -rf "$root"
    mkdir -p "$root"
    echo "standin-base: debootstrap $VERSION_CODENAME (minbase, redis-server) from apt's mirror" >&2
    debootstrap --variant=minbase --include=redis-server "$VERSION_CODENAME" "$root" "$mirror" >"$cache/debootstrap.log" 2>&1 ||
        { tail -n 20 "$cache/debootstrap.log" >&2; exit 1; }
    install -m 0755 "$valkey" "$root/usr/local/bin/valkey-server"
    install -m 0755 "$entrypoint" "$root/usr/local/bin/docker-entrypoint.sh"
    # The official images' users (uid/gid 999) and data directory; Debian's package made `redis`.
    chroot "$root" sh -ec '
        groupadd --system valkey && useradd --system --gid valkey --home-dir /data --no-create-home valkey
        mkdir -p /data && chown redis:redis /data
        apt-get clean
        rm -rf /var/lib/apt/lists/* /usr/share/doc /usr/share/man /usr/share/locale /var/log/*.log /var/cache/debconf/*-old'
    tar --numeric-owner -C "$root" -czf "$tarball.tmp" .
    mv "$tarball.tmp" "$tarball"
    rm -rf "$root"
fi

import() {
    local image=$1 server=$2 user=$3
    docker image inspect "$image" >/dev/null 2>&1 && return 0
    docker import \
        --change "ENV STANDIN_SERVER=$server STANDIN_USER=$user" \
        --change 'ENTRYPOINT ["docker-entrypoint.sh"]' \
        --change "CMD [\"$server\"]" \
        --change 'WORKDIR /data' \
        --change 'VOLUME /data' \
        --change 'EXPOSE 6379' \
        "$tarball" "$image" >/dev/null
}
import "$redis_image" redis-server redis
import "$valkey_image" valkey-server valkey
echo "$redis_image"
echo "$valkey_image"
