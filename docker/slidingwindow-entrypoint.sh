#!/bin/sh
# The module images' entrypoint: `redis-server ARGS` / `valkey-server ARGS` (or ARGS alone, as
# the base images take them; none runs the server alone) run with `--loadmodule` of the module added, after a config file
# when one comes first (the server reads only its first argument as one), unless ARGS load it
# already; then the base image's own entrypoint (docker-entrypoint.sh) runs as usual. Other
# commands (a shell, redis-cli) go to it unchanged.
set -e
module=/usr/local/lib/slidingwindow/libslidingwindow.so

if [ $# -eq 0 ] || [ "${1#-}" != "$1" ] || [ "${1%.conf}" != "$1" ]; then
    set -- "$SLIDINGWINDOW_SERVER" "$@"
fi

case "$1" in
    redis-server | valkey-server)
        case " $* " in
            *" $module "*) ;;
            *)
                server=$1
                shift
                if [ $# -gt 0 ] && [ "${1#-}" = "$1" ]; then
                    conf=$1
                    shift
                    set -- "$server" "$conf" --loadmodule "$module" "$@"
                else
                    set -- "$server" --loadmodule "$module" "$@"
                fi
                ;;
        esac
        ;;
esac

exec docker-entrypoint.sh "$@"
