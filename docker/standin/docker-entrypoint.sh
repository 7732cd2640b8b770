#!/bin/sh
# The stand-in base's entrypoint, with the official redis and valkey images' interface: an
# argument list starting with an option or a .conf file runs the image's server with it; the
# server started as root first takes /data for the image's user and drops to it; umask 0077.
# STANDIN_SERVER (redis-server or valkey-server) and STANDIN_USER (redis or valkey) come from
# `docker import --change ENV`.
set -e

if [ "${1#-}" != "$1" ] || [ "${1%.conf}" != "$1" ]; then
    set -- "$STANDIN_SERVER" "$@"
fi

if { [ "$1" = redis-server ] || [ "$1" = valkey-server ]; } && [ "$(id -u)" = 0 ]; then
    find . \! -user "$STANDIN_USER" -exec chown "$STANDIN_USER" '{}' +
    exec setpriv --reuid="$STANDIN_USER" --regid="$STANDIN_USER" --clear-groups -- "$0" "$@"
fi

umask 0077
exec "$@"
