#!/usr/bin/env bash
# Run lock-cassandra's tests against a real cluster (started by scripts/cassandra-up.sh, or
# your own: LOCK_TEST_CASSANDRA=host:port[,host:port…] scripts/cassandra-test.sh).
# Extra arguments go to `cargo test`, e.g. `scripts/cassandra-test.sh -- --nocapture`.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$here/.."

export LOCK_TEST_CASSANDRA="${LOCK_TEST_CASSANDRA:-127.0.0.1:9042}"
first="${LOCK_TEST_CASSANDRA%%,*}"
host="${first%:*}"
port="${first##*:}"
host="${host#[}"
host="${host%]}"
if ! (exec 3<>"/dev/tcp/$host/$port") 2>/dev/null; then
    echo "cassandra-test: nothing listens on $first (LOCK_TEST_CASSANDRA=$LOCK_TEST_CASSANDRA)." >&2
    echo "                Start a node with scripts/cassandra-up.sh, or point LOCK_TEST_CASSANDRA at one." >&2
    exit 1
fi

echo "cassandra-test: LOCK_TEST_CASSANDRA=$LOCK_TEST_CASSANDRA"
cargo test -p lock-cassandra "$@"

cat <<MSG

cassandra-test: the cell-store semantics pass on $LOCK_TEST_CASSANDRA.
The benchmark against the same cluster:

    cargo run -p bench-harness -- --backend cassandra --nodes $LOCK_TEST_CASSANDRA --threads 8
MSG
