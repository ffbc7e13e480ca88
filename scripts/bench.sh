#!/usr/bin/env bash
# Benchmarks: quorumlock side by side with rslock and a hand-written floor, on five local
# redis-server nodes, in one run. See docs/benchmarks.md.
#
#   scripts/bench.sh            # full run (about 5 minutes after the build): criterion
#                               # micro-benchmarks, then the scenarios; rewrites the results
#                               # section of docs/benchmarks.md and the plots in docs/benchmarks/
#   scripts/bench.sh --smoke    # every scenario briefly, with its checks; writes nothing
#   scripts/bench.sh --no-micro [scenario options...]   # e.g. --reps 3 --only s1,s3
#
# Needs `redis-server` (Debian: apt-get install redis-server) or QUORUMLOCK_REDIS_SERVER.
# The machine should be otherwise idle: every number is a ratio measured in the same run,
# but a busy machine still widens the tails.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

micro=1
smoke=0
args=()
for arg in "$@"; do
    case "$arg" in
        --no-micro) micro=0 ;;
        --smoke) smoke=1 ;;
        *) args+=("$arg") ;;
    esac
done

if ! command -v "${QUORUMLOCK_REDIS_SERVER:-redis-server}" >/dev/null 2>&1 && [[ ! -x /usr/bin/redis-server ]]; then
    echo "redis-server not found: install it (apt-get install redis-server) or set QUORUMLOCK_REDIS_SERVER" >&2
    exit 1
fi

if [[ $smoke == 1 ]]; then
    QUORUMLOCK_BENCH_SMOKE=1 exec cargo bench --bench scenarios -- "${args[@]}"
fi

target="${CARGO_TARGET_DIR:-target}"
started=$SECONDS
if [[ $micro == 1 ]]; then
    echo "==> criterion micro-benchmarks"
    rm -rf "$target/criterion"
    cargo bench --bench micro
    args+=(--criterion "$target/criterion")
fi
echo "==> scenarios"
cargo bench --bench scenarios -- --plots docs/benchmarks --docs docs/benchmarks.md "${args[@]}"
echo "==> done in $((SECONDS - started)) s: docs/benchmarks.md and docs/benchmarks/*.png updated"
