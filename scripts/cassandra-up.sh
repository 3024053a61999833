#!/usr/bin/env bash
# Start a single-node ScyllaDB (default) or Apache Cassandra in Docker and wait until it
# answers CQL on 127.0.0.1:9042.
#
#   scripts/cassandra-up.sh              # ScyllaDB 6.2
#   scripts/cassandra-up.sh cassandra    # Apache Cassandra 5.0
#   scripts/cassandra-up.sh down         # stop and remove whichever runs
#
# Then: scripts/cassandra-test.sh
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
compose_file="$here/docker-compose.cassandra.yml"
flavour="${1:-scylla}"
wait_secs="${CASSANDRA_UP_TIMEOUT:-240}"

if ! command -v docker >/dev/null 2>&1; then
    echo "cassandra-up: docker is not installed; start a Cassandra 4.x/5.x or ScyllaDB 5.x/6.x node yourself" >&2
    echo "              and point LOCK_TEST_CASSANDRA at it (host:port)." >&2
    exit 1
fi
if ! docker info >/dev/null 2>&1; then
    echo "cassandra-up: the docker client cannot reach a docker engine (is the daemon running?)" >&2
    exit 1
fi
# Compose v2 (`docker compose`) or the standalone v1 (`docker-compose`, 1.28+ for profiles).
if docker compose version >/dev/null 2>&1; then
    dc=(docker compose -p distributed-locks-cassandra)
elif command -v docker-compose >/dev/null 2>&1; then
    dc=(docker-compose -p distributed-locks-cassandra)
else
    echo "cassandra-up: neither 'docker compose' nor 'docker-compose' is installed" >&2
    exit 1
fi
compose() { "${dc[@]}" -f "$compose_file" --profile scylla --profile cassandra "$@"; }

case "$flavour" in
    down)
        compose down --remove-orphans
        exit 0
        ;;
    scylla | cassandra) ;;
    *)
        echo "usage: $0 [scylla|cassandra|down]" >&2
        exit 2
        ;;
esac

echo "cassandra-up: starting $flavour (compose file $compose_file)"
"${dc[@]}" -f "$compose_file" --profile "$flavour" up -d "$flavour"

echo "cassandra-up: waiting up to ${wait_secs}s for CQL on 127.0.0.1:9042"
deadline=$((SECONDS + wait_secs))
until "${dc[@]}" -f "$compose_file" --profile "$flavour" exec -T "$flavour" \
    cqlsh -e "SELECT release_version FROM system.local" >/dev/null 2>&1; do
    if ((SECONDS >= deadline)); then
        echo "cassandra-up: $flavour did not answer CQL within ${wait_secs}s; its last log lines:" >&2
        "${dc[@]}" -f "$compose_file" --profile "$flavour" logs --tail 40 "$flavour" >&2 || true
        exit 1
    fi
    sleep 3
done
# The port as the host sees it (the tests connect from here, not from inside the container).
until (exec 3<>/dev/tcp/127.0.0.1/9042) 2>/dev/null; do
    if ((SECONDS >= deadline)); then
        echo "cassandra-up: CQL answers inside the container but 127.0.0.1:9042 is closed" >&2
        exit 1
    fi
    sleep 1
done
version="$("${dc[@]}" -f "$compose_file" --profile "$flavour" exec -T "$flavour" \
    cqlsh -e "SELECT release_version FROM system.local" 2>/dev/null | sed -n '4p' | tr -d ' ')"
echo "cassandra-up: $flavour ${version:-?} answers CQL on 127.0.0.1:9042"
echo "cassandra-up: next: scripts/cassandra-test.sh"
