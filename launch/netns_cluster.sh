#!/usr/bin/env bash
# Rehearse a two-host Ray cluster on ONE machine: two network namespaces ("hosts") joined by a veth
# pair, a Ray head in the first and a Ray worker node in the second. Needs root (ip netns).
#
#   bash launch/netns_cluster.sh up            # namespaces, link, head (host a), worker node (host b)
#   bash launch/netns_cluster.sh status        # addresses, processes per host, `ray status`
#   bash launch/netns_cluster.sh exec a|b CMD  # run CMD on a "host" (cluster address and token set)
#   bash launch/netns_cluster.sh kill b        # host b dies: SIGKILL every process in its namespace
#   bash launch/netns_cluster.sh cut | heal    # network cut between the hosts (link down) / back up
#   bash launch/netns_cluster.sh down          # stop what `up` started, delete the namespaces
#
# Each namespace has its own network stack: host a is 10.213.0.1, host b 10.213.0.2 (a /24 that
# exists only inside these two namespaces; both ends of the veth are called gcad0), plus its own
# loopback. Nothing listens outside the namespaces: the dashboard / job API is on host a's address,
# reachable only from the namespaces (`exec a ...`). Both hosts see this machine's filesystem, as
# NFS would give them: the store, --out and the Ray Train checkpoints go on the same paths.
#
# Environment (all optional):
#   GCAD_NETNS_DIR     state dir: cluster.env, auth token, Ray temp dirs a/ and b/, logs (default
#                      /tmp/gcadns-$USER; keep it short, Ray puts Unix sockets there). One cluster per dir.
#   GCAD_NETNS_TAG     name tag (default: the pid of `up`); namespaces are gcadns-TAG-a / gcadns-TAG-b
#   GCAD_NETNS_SUBNET  first three octets (default 10.213.0)
#   GCAD_NETNS_HEAD_CPUS / GCAD_NETNS_WORKER_CPUS   logical CPUs each host offers Ray (default 2 / 1:
#                      the head can take the whole 2-worker group when host b is lost)
#   RAY_health_check_period_ms (default here 1000), RAY_health_check_timeout_ms (2000),
#   RAY_health_check_failure_threshold (5), RAY_health_check_initial_delay_ms (2000): how fast the
#                      head's GCS declares a silent node dead (launch/README.md, "Losing a host")
#
# Stopping: `down` signals only processes that run inside the two namespaces it created (`ip netns
# pids`) and the process groups it started, never `ray stop` (which stops every Ray process of the
# machine), then deletes the namespaces (which deletes the veth pair).
set -euo pipefail
cd "$(dirname "$0")/.."
[ -z "${VIRTUAL_ENV:-}" ] && [ -f .venv/bin/activate ] && . .venv/bin/activate

DIR=${GCAD_NETNS_DIR:-/tmp/gcadns-${USER:-$(id -u)}}
STATE="$DIR/cluster.env"
IFACE=gcad0
GCS_PORT=6379
DASH_PORT=8265

die() { echo "error: $*" >&2; exit 2; }
say() { echo "[netns_cluster] $*"; }

load() {
  [ -f "$STATE" ] || return 1
  # shellcheck disable=SC1090
  . "$STATE"
}

# Ports are per namespace, so fixed ports cannot clash with anything else on the machine.
ray_ports() {
  echo --node-manager-port 8077 --object-manager-port 8076 --dashboard-agent-listen-port 52365 \
    --dashboard-agent-grpc-port 8078 --runtime-env-agent-port 8079 --metrics-export-port 8080 \
    --min-worker-port 10002 --max-worker-port 10999
}

# The environment of each host's Ray daemons (and so of every Ray worker process they start).
host_env() {
  echo RAY_AUTH_MODE=token RAY_AUTH_TOKEN_PATH="$DIR/auth_token" \
    GLOO_SOCKET_IFNAME=$IFACE NCCL_SOCKET_IFNAME=$IFACE \
    RAY_health_check_period_ms="${RAY_health_check_period_ms:-1000}" \
    RAY_health_check_timeout_ms="${RAY_health_check_timeout_ms:-2000}" \
    RAY_health_check_failure_threshold="${RAY_health_check_failure_threshold:-5}" \
    RAY_health_check_initial_delay_ms="${RAY_health_check_initial_delay_ms:-2000}" \
    RAY_TRAIN_WORKER_GROUP_START_TIMEOUT_S="${RAY_TRAIN_WORKER_GROUP_START_TIMEOUT_S:-120}" \
    RAY_DEDUP_LOGS=1
}

# Live (non-zombie) processes in namespace $1 and in process group $2 (with descendants).
host_pids() {
  local ns=$1 pg=${2:-} all kids prev=""
  all=$(ip netns pids "$ns" 2>/dev/null | tr '\n' ' ' || true)
  if [ -n "$pg" ]; then
    all="$all $(ps -eo pid=,pgid= | awk -v g="$pg" '$2==g {print $1}' | tr '\n' ' ')"
  fi
  all=$(printf '%s\n' $all | sort -un | tr '\n' ' ')
  while [ "$all" != "$prev" ]; do
    prev=$all
    kids=$(ps -eo pid=,ppid= | awk -v s=" $all " 'index(s, " "$2" ") > 0 {print $1}')
    all=$(printf '%s\n' $all $kids | sort -un | tr '\n' ' ')
  done
  local p out=""
  for p in $all; do
    [ "$(ps -o stat= -p "$p" 2>/dev/null | cut -c1)" = Z ] && continue
    [ -d "/proc/$p" ] && out="$out $p"
  done
  echo "$out"
}

kill_host() {  # $1 namespace, $2 process group, $3 grace seconds (0 = SIGKILL at once)
  local ns=$1 pg=$2 grace=$3 pids
  pids=$(host_pids "$ns" "$pg")
  [ -z "${pids// /}" ] && return 0
  if [ "$grace" -gt 0 ]; then
    kill -TERM $pids 2>/dev/null || true
    for _ in $(seq 1 "$grace"); do
      pids=$(host_pids "$ns" "$pg")
      [ -z "${pids// /}" ] && return 0
      sleep 1
    done
  fi
  kill -KILL $pids 2>/dev/null || true
  sleep 0.5
}

wait_gcs() {  # wait until the head answers on its GCS port (from inside host b's namespace)
  local t
  for t in $(seq 1 120); do
    if ip netns exec "$NS_B" python - "$HEAD_IP" "$GCS_PORT" <<'EOF' 2>/dev/null; then return 0; fi
import socket, sys
socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=1).close()
EOF
    sleep 1
  done
  return 1
}

up() {
  if load && ip netns pids "$NS_A" >/dev/null 2>&1; then
    echo "already up: head $HEAD_IP (namespaces $NS_A, $NS_B; state $STATE)"; return 0
  fi
  command -v ray >/dev/null || die "ray: not found (run launch/setup.sh)"
  [ "$(id -u)" = 0 ] || die "ip netns needs root"
  local tag=${GCAD_NETNS_TAG:-$$} subnet=${GCAD_NETNS_SUBNET:-10.213.0}
  NS_A=gcadns-$tag-a NS_B=gcadns-$tag-b HEAD_IP=$subnet.1 WORKER_IP=$subnet.2
  # a/tmp, b/tmp: each host's TMPDIR (its processes' temporary files, pymp-* folders among them), deleted by
  # `down`: processes killed there cannot clean up after themselves
  mkdir -p "$DIR/a/tmp" "$DIR/b/tmp"; chmod 700 "$DIR"
  # Record first, so that `down` cleans up after a partial `up`.
  cat > "$STATE" <<EOF
NS_A=$NS_A
NS_B=$NS_B
HEAD_IP=$HEAD_IP
WORKER_IP=$WORKER_IP
PGID_A=
PGID_B=
EOF
  ip netns add "$NS_A" || die "ip netns add $NS_A failed (root? name taken?)"
  ip netns add "$NS_B" || die "ip netns add $NS_B failed"
  # Both ends are created inside their namespaces: no interface appears in the machine's own namespace.
  ip link add $IFACE netns "$NS_A" type veth peer name $IFACE netns "$NS_B"
  ip -n "$NS_A" addr add "$HEAD_IP/24" dev $IFACE
  ip -n "$NS_B" addr add "$WORKER_IP/24" dev $IFACE
  local ns
  for ns in "$NS_A" "$NS_B"; do
    ip -n "$ns" link set lo up
    ip -n "$ns" link set $IFACE up
  done
  local token="$DIR/auth_token"
  [ -s "$token" ] || (umask 077; python -c "import secrets; print(secrets.token_hex(32))" > "$token")
  local common=(--disable-usage-stats $(ray_ports))
  say "host a ($NS_A, $HEAD_IP): starting the Ray head (${GCAD_NETNS_HEAD_CPUS:-2} CPUs)"
  # setsid: this host's Ray daemons get their own process group, recorded for `down`.
  # shellcheck disable=SC2046
  setsid ip netns exec "$NS_A" env $(host_env) TMPDIR="$DIR/a/tmp" ray start --head --node-ip-address "$HEAD_IP" \
    --port $GCS_PORT --dashboard-host "$HEAD_IP" --dashboard-port $DASH_PORT --ray-client-server-port 10001 \
    --num-cpus "${GCAD_NETNS_HEAD_CPUS:-2}" --temp-dir "$DIR/a" "${common[@]}" > "$DIR/start-a.log" 2>&1 &
  local pid_a=$!
  sed -i "s/^PGID_A=.*/PGID_A=$pid_a/" "$STATE"
  wait "$pid_a" || { tail -n 20 "$DIR/start-a.log" >&2; die "head failed to start (log $DIR/start-a.log); run: $0 down"; }
  wait_gcs || die "head not reachable from host b at $HEAD_IP:$GCS_PORT; run: $0 down"
  say "host b ($NS_B, $WORKER_IP): joining a Ray worker node (${GCAD_NETNS_WORKER_CPUS:-1} CPUs)"
  # shellcheck disable=SC2046
  setsid ip netns exec "$NS_B" env $(host_env) TMPDIR="$DIR/b/tmp" ray start --address "$HEAD_IP:$GCS_PORT" \
    --node-ip-address "$WORKER_IP" --num-cpus "${GCAD_NETNS_WORKER_CPUS:-1}" --temp-dir "$DIR/b" \
    "${common[@]}" > "$DIR/start-b.log" 2>&1 &
  local pid_b=$!
  sed -i "s/^PGID_B=.*/PGID_B=$pid_b/" "$STATE"
  wait "$pid_b" || { tail -n 20 "$DIR/start-b.log" >&2; die "worker node failed to start (log $DIR/start-b.log); run: $0 down"; }
  cat >> "$STATE" <<EOF
RAY_ADDRESS=http://$HEAD_IP:$DASH_PORT
GCAD_RAY_GCS=$HEAD_IP:$GCS_PORT
RAY_AUTH_TOKEN_PATH=$token
EOF
  cat <<EOF
Two-host Ray cluster is up.
  host a: namespace $NS_A, $HEAD_IP  (Ray head; job API http://$HEAD_IP:$DASH_PORT, reachable from the namespaces only)
  host b: namespace $NS_B, $WORKER_IP (Ray worker node)
  auth token: $token
Submit from host a:
  bash launch/netns_cluster.sh exec a bash launch/submit.sh --store /abs/graph.zarr --workers 2 --placement-strategy SPREAD --out /abs/runs/pre
Lose host b:  bash launch/netns_cluster.sh kill b     (or: cut / heal)
Stop:         bash launch/netns_cluster.sh down
EOF
}

status() {
  load || { echo "not running (no $STATE)"; return 3; }
  local alive=0 h ns pg
  for h in a b; do
    if [ $h = a ]; then ns=$NS_A pg=$PGID_A; else ns=$NS_B pg=$PGID_B; fi
    if ip netns pids "$ns" >/dev/null 2>&1; then
      local n; n=$(host_pids "$ns" "$pg" | wc -w)
      echo "host $h: namespace $ns, link $(ip -n "$ns" -br link show $IFACE 2>/dev/null | awk '{print $2}'), $n process(es)"
      [ "$n" -gt 0 ] && alive=1
    else
      echo "host $h: namespace $ns gone"
    fi
  done
  [ $alive = 1 ] || return 3
  ip netns exec "$NS_A" env RAY_AUTH_MODE=token RAY_AUTH_TOKEN_PATH="$RAY_AUTH_TOKEN_PATH" \
    ray status --address "$GCAD_RAY_GCS" 2>/dev/null || true
}

run_on() {  # exec a|b CMD...
  load || die "not running (no $STATE)"
  local h=${1:-}; shift || true
  local ns; case $h in a) ns=$NS_A ;; b) ns=$NS_B ;; *) die "exec: host must be a or b" ;; esac
  [ $# -gt 0 ] || die "exec: no command"
  exec ip netns exec "$ns" env RAY_AUTH_MODE=token RAY_AUTH_TOKEN_PATH="$RAY_AUTH_TOKEN_PATH" \
    RAY_ADDRESS="$RAY_ADDRESS" GCAD_RAY_ADDRESS="$RAY_ADDRESS" GLOO_SOCKET_IFNAME=$IFACE "$@"
}

kill_b() {
  load || die "not running (no $STATE)"
  [ "${1:-b}" = b ] || die "kill: only host b (the worker node) can be lost; use down for the head"
  local pids; pids=$(host_pids "$NS_B" "$PGID_B")
  say "host b lost: SIGKILL $(echo $pids | wc -w) process(es) in $NS_B"
  [ -n "${pids// /}" ] && kill -KILL $pids 2>/dev/null || true
}

link() {  # down|up
  load || die "not running (no $STATE)"
  ip -n "$NS_B" link set $IFACE "$1"
  say "link between host a and host b: $1"
}

down() {
  if ! load; then echo "not running (no $STATE)"; return 0; fi
  say "stopping host b ($NS_B) and host a ($NS_A)"
  # Host b first (it would otherwise try to reach a head that is going away), then the head.
  ip netns pids "$NS_B" >/dev/null 2>&1 && kill_host "$NS_B" "$PGID_B" "${GCAD_RAY_STOP_GRACE:-5}"
  ip netns pids "$NS_A" >/dev/null 2>&1 && kill_host "$NS_A" "$PGID_A" "${GCAD_RAY_STOP_GRACE:-5}"
  local ns
  for ns in "$NS_B" "$NS_A"; do
    ip netns pids "$ns" >/dev/null 2>&1 && { ip netns del "$ns" || say "could not delete $ns"; }
  done
  rm -f "$STATE"
  rm -rf "$DIR/a/tmp" "$DIR/b/tmp"  # the hosts' temporary files (see up)
  say "stopped (logs kept in $DIR)"
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  status) status ;;
  exec) shift; run_on "$@" ;;
  kill) shift; kill_b "$@" ;;
  cut) link down ;;
  heal) link up ;;
  *) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 2 ;;
esac
