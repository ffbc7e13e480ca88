#!/usr/bin/env bash
# Quick-start demo: five local Redis nodes, one Redlock, the failure cases.
#
#   scripts/demo.sh
#
# Needs `redis-server` (installed here through apt-get when running as root or with
# passwordless sudo) and a Rust toolchain. The demo starts its own redis-server processes
# on free 127.0.0.1 ports and stops them when it ends; it does not use a system Redis.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

find_redis_server() {
    if [[ -n "${QUORUMLOCK_REDIS_SERVER:-}" ]]; then
        [[ -x "$QUORUMLOCK_REDIS_SERVER" ]] && return 0
        echo "QUORUMLOCK_REDIS_SERVER=$QUORUMLOCK_REDIS_SERVER is not an executable file." >&2
        exit 1
    fi
    command -v redis-server >/dev/null 2>&1 ||
        [[ -x /usr/bin/redis-server ]] ||
        [[ -x /usr/local/bin/redis-server ]]
}

if ! command -v cargo >/dev/null 2>&1; then
    echo "cargo not found: install Rust first (https://rustup.rs), then run $0 again." >&2
    exit 1
fi

if ! find_redis_server; then
    if command -v apt-get >/dev/null 2>&1; then
        if [[ "$(id -u)" -eq 0 ]]; then
            as_root=()
        elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
            as_root=(sudo)
        else
            as_root=(none)
        fi
        if [[ "${as_root[*]}" != none ]]; then
            echo "redis-server not found; installing it with apt-get..."
            "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update
            "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y redis-server
        fi
    fi
    if ! find_redis_server; then
        cat >&2 <<'MSG'
redis-server not found. The demo starts its own local Redis nodes and needs the binary:

  Debian/Ubuntu:  sudo apt-get update && sudo apt-get install -y redis-server
  Fedora/RHEL:    sudo dnf install -y redis
  macOS:          brew install redis

or set QUORUMLOCK_REDIS_SERVER to the path of a redis-server binary. Then run this script again.
MSG
        exit 1
    fi
fi

exec cargo run --example demo
