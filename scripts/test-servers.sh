#!/usr/bin/env bash
# A Redis, a ZooKeeper and an etcd on loopback, started exactly as the lock-redis,
# lock-zookeeper and lock-etcd tests start theirs (the tests do it themselves, through the
# test-servers crate; this script is for runs by hand and for the benchmark against real
# servers).
#
#   scripts/test-servers.sh install   apt-get install redis-server, zookeeper, etcd-server if missing
#   scripts/test-servers.sh check     say whether all three are installed (exit 1 if not)
#   scripts/test-servers.sh start     start all three in the background, wait until they answer
#   scripts/test-servers.sh status    PING / ruok / GET /health each
#   scripts/test-servers.sh stop      stop them and remove their data
#
# Environment: REDIS_PORT (default 6390), ZK_PORT (default 2191), ETCD_PORT and ETCD_PEER_PORT
# (default 2389 and 2390), and STATE_DIR for pids, logs and data (default
# ${TMPDIR:-/tmp}/lockbench-servers).
set -euo pipefail

REDIS_PORT="${REDIS_PORT:-6390}"
ZK_PORT="${ZK_PORT:-2191}"
ETCD_PORT="${ETCD_PORT:-2389}"
ETCD_PEER_PORT="${ETCD_PEER_PORT:-2390}"
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
  command -v etcd >/dev/null 2>&1 || need+=(etcd-server)
  echo "${need[*]-}"
}

redis_ok() { redis-cli -h 127.0.0.1 -p "$REDIS_PORT" ping 2>/dev/null | grep -q PONG; }
zk_ok() {
  local answer
  answer="$(timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/$ZK_PORT; printf ruok >&3; cat <&3" 2>/dev/null || true)"
  [ "$answer" = imok ]
}
etcd_ok() {
  local answer
  answer="$(timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/$ETCD_PORT; printf 'GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n' >&3; cat <&3" 2>/dev/null || true)"
  [[ "$answer" == *'"health":"true"'* ]]
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
    echo "test-servers: redis-server, zookeeper and etcd-server are installed"
    ;;
  check)
    need="$(missing)"
    if [ -n "$need" ]; then
      echo "test-servers: missing: $need; install with: apt-get install -y redis-server zookeeper etcd-server" >&2
      exit 1
    fi
    echo "test-servers: redis-server $(redis-server --version | sed -n 's/.*v=\([^ ]*\).*/\1/p'), zookeeper jars and java, etcd $(etcd --version | sed -n 's/^etcd Version: //p') present"
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
    if ! etcd_ok; then
      # Short heartbeats and elections, as the tests' etcd: leases as short as 1 s are granted.
      etcd --name lockbench --data-dir "$STATE_DIR/etcd" \
        --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
        --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
        --initial-cluster "lockbench=http://127.0.0.1:$ETCD_PEER_PORT" --initial-cluster-state new \
        --heartbeat-interval 50 --election-timeout 500 --logger zap --log-level warn \
        >"$STATE_DIR/etcd.log" 2>&1 &
      echo $! >"$STATE_DIR/etcd.pid"
    fi
    wait_for redis redis_ok
    wait_for zk zk_ok
    wait_for etcd etcd_ok
    echo "redis:     redis://127.0.0.1:$REDIS_PORT/"
    echo "zookeeper: 127.0.0.1:$ZK_PORT"
    echo "etcd:      http://127.0.0.1:$ETCD_PORT"
    ;;
  status)
    rc=0
    if redis_ok; then echo "redis on $REDIS_PORT: PONG"; else echo "redis on $REDIS_PORT: down"; rc=1; fi
    if zk_ok; then echo "zookeeper on $ZK_PORT: imok"; else echo "zookeeper on $ZK_PORT: down"; rc=1; fi
    if etcd_ok; then echo "etcd on $ETCD_PORT: healthy"; else echo "etcd on $ETCD_PORT: down"; rc=1; fi
    exit $rc
    ;;
  stop)
    for name in redis zk etcd; do
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
    sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
    ;;
esac
