#!/usr/bin/env bash
# The whole test suite, on a fresh machine: installs what the tests need, then runs them.
#
# The Redis, ZooKeeper, etcd, PostgreSQL and MariaDB tests start their own servers on free
# loopback ports, from Debian's packages `redis-server`, `redis-sentinel`, `zookeeper`,
# `etcd-server` (and `etcd-client`, whose `etcdctl` the election tests run), `postgresql` and
# `pgbouncer` (run as the `postgres` system user when the tests run as root) and
# `mariadb-server` (as the `mysql` user), `python3-kazoo` for the ZooKeeper interoperability
# tests, `prometheus` for the `promtool` that checks the lock service's metrics; the etcd
# client crate runs `protoc`
# (package `protobuf-compiler`) when it is built. This script installs them when they are
# missing (as root directly, otherwise through sudo). The Cassandra integration tests run only when
# LOCK_TEST_CASSANDRA=host:port names a cluster (see README.md).
set -euo pipefail
cd "$(dirname "$0")/.."

need_packages=()
command -v redis-server >/dev/null 2>&1 || need_packages+=(redis-server)
# The Redis Sentinel cluster's tests run Sentinels too.
command -v redis-sentinel >/dev/null 2>&1 || need_packages+=(redis-sentinel)
[ -f /usr/share/java/zookeeper.jar ] || need_packages+=(zookeeper)
command -v etcd >/dev/null 2>&1 || need_packages+=(etcd-server)
# The etcd election tests run etcd's own `etcdctl elect` against ours.
command -v etcdctl >/dev/null 2>&1 || need_packages+=(etcd-client)
# The PostgreSQL server is not on PATH: Debian keeps it in /usr/lib/postgresql/<version>/bin.
compgen -G '/usr/lib/postgresql/*/bin/postgres' >/dev/null || need_packages+=(postgresql)
# MariaDB's server is in /usr/sbin, which may not be on PATH.
command -v mariadbd >/dev/null || [ -x /usr/sbin/mariadbd ] || need_packages+=(mariadb-server)
command -v pgbouncer >/dev/null || [ -x /usr/sbin/pgbouncer ] || need_packages+=(pgbouncer)
python3 -c "import kazoo" 2>/dev/null || /usr/bin/python3 -c "import kazoo" 2>/dev/null || need_packages+=(python3-kazoo)
command -v protoc >/dev/null 2>&1 || [ -n "${PROTOC:-}" ] || need_packages+=(protobuf-compiler)
# lock-service's metrics test runs `promtool check metrics` on what a node serves.
command -v promtool >/dev/null 2>&1 || need_packages+=(prometheus)
if [ ${#need_packages[@]} -gt 0 ]; then
  echo "test.sh: installing ${need_packages[*]} (needed by the Redis, ZooKeeper, etcd, PostgreSQL, MariaDB and lock-service metrics tests)" >&2
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq "${need_packages[@]}" >/dev/null
fi
# The packages start system services; the tests do not use them, they start their own.

if [ -z "${LOCK_TEST_CASSANDRA:-}" ]; then
  echo "test.sh: LOCK_TEST_CASSANDRA not set: the Cassandra integration and conformance tests will report 'not run' (see README.md)" >&2
fi

# The house habits: one formatting (rustfmt.toml) first, as it takes seconds; then the criterion
# benchmarks run once each in test mode (criterion runs every benchmark a single time when not
# given --bench: a bench that no longer compiles fails here instead of rotting); then no clippy
# warning in any target (benches and examples included) and docs without broken or private
# links. All of it in the test profile, the tests' own, so that clippy and rustdoc share the
# build scripts (ring's and aws-lc's C) and proc-macros the tests compile, instead of compiling
# them again in the dev profile; clippy still checks the dependencies itself (about 2.5 min).
# Fresh-clone CI on 2 cores: 29 min 5 s with clippy and rustdoc in the dev profile first,
# 27 min 23 s in this order, 28 min 22 s with every target built before clippy (whose check of
# the dependencies reuses nothing of a build). `--workspace` everywhere, so every step resolves
# the same features.
features=(--features bench-harness/etcd)
# A clean clone gains nothing from incremental compilation, whose caches were half of a CI
# build's 16 GB; a developer's own re-runs keep it.
if [ -n "${CI:-}" ]; then export CARGO_INCREMENTAL=0; fi
step() { echo "test.sh: $*" >&2; }
step "cargo fmt --all --check"
cargo fmt --all --check
step "cargo test --workspace --benches (each benchmark once)"
cargo test --workspace --benches "${features[@]}"
step "cargo clippy --profile test --workspace --all-targets -- -D warnings"
cargo clippy --profile test --workspace --all-targets "${features[@]}" -- -D warnings
# A program that only locks builds lock-service's client alone, without openraft, redb or
# clap (its `server` feature is on by default): check that build still compiles and still
# pulls none of them in.
step "cargo check --profile test -p lock-service --no-default-features (the client alone)"
cargo check --profile test -p lock-service --no-default-features
if cargo tree -p lock-service --no-default-features -e normal --prefix none \
    | grep -E '^(openraft|redb|clap) '; then
  echo "test.sh: lock-service's client-only build depends on the crates above" >&2
  exit 1
fi
# lockctl is such a program.
if cargo tree -p lockctl -e normal --prefix none | grep -E '^(openraft|redb) '; then
  echo "test.sh: lockctl depends on the lock service's server (the crates above)" >&2
  exit 1
fi
step "cargo doc --profile test --no-deps --workspace (RUSTDOCFLAGS=-D warnings)"
RUSTDOCFLAGS="-D warnings" cargo doc --profile test --no-deps --workspace "${features[@]}"

# nextest runs each test in its own process, in parallel across binaries; it does not run
# doctests, so they go first (its summary line then closes the run).
# The harness's etcd engine is a cargo feature (its client needs protoc to build, and the
# default build must need nothing installed); the tests build it in (`features` above).
# Most tests wait on timers and on servers in other processes rather than on a core (their
# durations add up to about twice nextest's wall time at one test per core), so nextest runs two
# per core; the suite is written to hold on a loaded machine. NEXTEST_TEST_THREADS or
# `--test-threads` overrides it.
if cargo nextest --version >/dev/null 2>&1; then
  export NEXTEST_TEST_THREADS="${NEXTEST_TEST_THREADS:-$(( $(nproc) * 2 ))}"
  cargo test --workspace --doc "${features[@]}"
  cargo nextest run --workspace --no-fail-fast "${features[@]}" "$@"
else
  cargo test --workspace --no-fail-fast "${features[@]}" "$@"
fi
