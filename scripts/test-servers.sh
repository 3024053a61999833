#!/usr/bin/env bash
# A Redis and a ZooKeeper on loopback, started exactly as the lock-redis and lock-zookeeper
# tests start theirs (the tests do it themselves, through the test-servers crate; this script is
# for runs by hand and for the benchmark against real servers).
#
#   scripts/test-servers.sh install   apt-get install redis-server and zookeeper if missing
#   scripts/test-servers.sh check     say whether both are installed (exit 1 if not)
#   scripts/test-servers.sh start     start both in the background, wait until they answer
#   scripts/test-servers.sh status    PING / ruok both
#   scripts/test-servers.sh stop      stop both and remove their data
#
# Environment: REDIS_PORT (default 6390), ZK_PORT (default 2191), and STATE_DIR for pids,
# logs and data (default ${TMPDIR:-/tmp}/lockbench-servers).
set -euo pipefail

REDIS_PORT="${REDIS_PORT:-6390}"
ZK_PORT="${ZK_PORT:-2191}"
STATE_DIR="${STATE_DIR:-${TMPDIR:-/tmp}/lockbench-servers}"
ZK_CLASSPATH="${ZOOKEEPER_CLASSPATH:-/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar}"
# Session expiry is checked every tick; 200 ms lets sessions as short as 400 ms be granted.
ZK_TICK_MS=200

missing() {
  local need=()
  command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
  local jar
  for jar in ${ZK_CLASSPATH//:/ }; do
    [ -f "$jar" ] || { need+=(zookeeper); break; }
  done
  command -v java >/dev/null 2>&1 || [[ " ${need[*]-} " == *" zookeeper "* ]] || need+=(zookeeper)
  echo "${need[*]-}"
}

redis_ok() { redis-cli -h 127.0.0.1 -p "$REDIS_PORT" ping 2>/dev/null | grep -q PONG; }
zk_ok() {
  local answer
  answer="$(timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/$ZK_PORT; printf ruok >&3; cat <&3" 2>/dev/null || true)"
  [ "$answer" = imok ]
}

wait_for() { # name check-function
  local deadline=$((SECONDS + 60))
  until "$2"; do
    if [ $SECONDS -ge $deadline ]; then
      echo "test-servers: $1 did not answer within 60 s; its log: $STATE_DIR/$1.log" >&2
      tail -20 "$STATE_DIR/$1.log" >&2 || true
      exit 1
    fi
    sleep 0.2
  done
}

case "${1:-}" in
  install)
    need="$(missing)"
    if [ -n "$need" ]; then
      sudo=""
      [ "$(id -u)" -eq 0 ] || sudo="sudo"
      export DEBIAN_FRONTEND=noninteractive
      $sudo apt-get update -qq
      # shellcheck disable=SC2086
      $sudo apt-get install -y -qq $need >/dev/null
    fi
    echo "test-servers: redis-server and zookeeper are installed"
    ;;
  check)
    need="$(missing)"
    if [ -n "$need" ]; then
      echo "test-servers: missing: $need; install with: apt-get install -y redis-server zookeeper" >&2
      exit 1
    fi
    echo "test-servers: redis-server $(redis-server --version | sed -n 's/.*v=\([^ ]*\).*/\1/p'), zookeeper jars and java present"
    ;;
  start)
    need="$(missing)"
    if [ -n "$need" ]; then
      echo "test-servers: missing: $need; run scripts/test-servers.sh install" >&2
      exit 1
    fi
    mkdir -p "$STATE_DIR/redis" "$STATE_DIR/zk/data"
    if ! redis_ok; then
      redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no --dir "$STATE_DIR/redis" \
        >"$STATE_DIR/redis.log" 2>&1 &
      echo $! >"$STATE_DIR/redis.pid"
    fi
    if ! zk_ok; then
      cat >"$STATE_DIR/zk/zoo.cfg" <<CFG
tickTime=$ZK_TICK_MS
dataDir=$STATE_DIR/zk/data
clientPort=$ZK_PORT
clientPortAddress=127.0.0.1
admin.enableServer=false
4lw.commands.whitelist=*
minSessionTimeout=$((2 * ZK_TICK_MS))
maxSessionTimeout=60000
initLimit=10
syncLimit=5
preAllocSize=1024
maxClientCnxns=0
CFG
      java -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 \
        -Dorg.slf4j.simpleLogger.defaultLogLevel=warn -Dzookeeper.admin.enableServer=false \
        -cp "$ZK_CLASSPATH" org.apache.zookeeper.server.quorum.QuorumPeerMain "$STATE_DIR/zk/zoo.cfg" \
        >"$STATE_DIR/zk.log" 2>&1 &
      echo $! >"$STATE_DIR/zk.pid"
    fi
    wait_for redis redis_ok
    wait_for zk zk_ok
    echo "redis:     redis://127.0.0.1:$REDIS_PORT/"
    echo "zookeeper: 127.0.0.1:$ZK_PORT"
    ;;
  status)
    rc=0
    if redis_ok; then echo "redis on $REDIS_PORT: PONG"; else echo "redis on $REDIS_PORT: down"; rc=1; fi
    if zk_ok; then echo "zookeeper on $ZK_PORT: imok"; else echo "zookeeper on $ZK_PORT: down"; rc=1; fi
    exit $rc
    ;;
  stop)
    for name in redis zk; do
      if [ -f "$STATE_DIR/$name.pid" ]; then
        pid="$(cat "$STATE_DIR/$name.pid")"
        kill "$pid" 2>/dev/null || true
        for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$pid" 2>/dev/null || true
      fi
    done
    rm -rf "$STATE_DIR"
    echo "test-servers: stopped"
    ;;
  *)
    sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
    ;;
esac
