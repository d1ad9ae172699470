#!/usr/bin/env bash
# A single-machine Ray cluster (head node only) for submitting gcad-dist jobs with launch/submit.sh.
#
#   bash launch/local_cluster.sh start     # start the head, print its address and how to submit
#   bash launch/local_cluster.sh status    # is it up? (ray status against it)
#   bash launch/local_cluster.sh stop      # stop THIS head only
#
# Environment (all optional):
#   GCAD_RAY_DIR    state + Ray temp dir (default /tmp/gcad-ray-$USER; keep it short: Ray puts Unix
#                   sockets under it and socket paths are limited to 107 characters)
#   GCAD_RAY_PORT   base port (default 26379). The head uses BASE (GCS), BASE+1 (dashboard / job API),
#                   BASE+2 (Ray client), BASE+3..BASE+8 (node manager, object manager, agents, metrics)
#                   and BASE+100..BASE+199 (worker processes). Pick another BASE to run a second cluster.
#   GCAD_RAY_CPUS   CPUs the head offers to Ray (default: all). GCAD_RAY_GPUS likewise.
#
# Security: token authentication is ON. A random token is written to $GCAD_RAY_DIR/auth_token (mode 600);
# clients need RAY_AUTH_MODE=token and RAY_AUTH_TOKEN_PATH pointing at it (launch/submit.sh does this).
# The dashboard / job API listens on 127.0.0.1 only.
#
# Why not plain `ray stop`: it stops EVERY Ray process of this machine (other clusters, other users'
# ray.init() sessions). `stop` here signals only the process group this script started, plus the
# worker processes forked by its raylet, by process id.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -z "${VIRTUAL_ENV:-}" ] && [ -f .venv/bin/activate ] && . .venv/bin/activate

DIR=${GCAD_RAY_DIR:-/tmp/gcad-ray-${USER:-$(id -u)}}
BASE=${GCAD_RAY_PORT:-26379}
STATE="$DIR/cluster.env"

die() { echo "error: $*" >&2; exit 2; }

# All processes of process group $1 and their descendants (workers re-group themselves).
group_pids() {
  local pg=$1 all kids prev=""
  all=$(ps -eo pid=,pgid= | awk -v g="$pg" '$2==g {print $1}' | sort -u | tr '\n' ' ')
  while [ "$all" != "$prev" ]; do
    prev=$all
    kids=$(ps -eo pid=,ppid= | awk -v s=" $all " 'index(s, " "$2" ") > 0 {print $1}')
    all=$(printf '%s\n' $all $kids | sort -u | tr '\n' ' ')
  done
  echo "$all"
}

is_up() {
  [ -f "$STATE" ] || return 1
  # shellcheck disable=SC1090
  . "$STATE"
  [ -n "$(group_pids "$GCAD_RAY_PGID" | tr -d ' ')" ] || return 1
}

start() {
  if is_up; then
    echo "already running: $GCAD_RAY_ADDRESS (state in $STATE)"; return 0
  fi
  command -v ray >/dev/null || die "ray: not found (run launch/setup.sh, or pip install 'ray[default,train]')"
  mkdir -p "$DIR"; chmod 700 "$DIR"
  local token="$DIR/auth_token"
  if [ ! -s "$token" ]; then
    (umask 077; python -c "import secrets; print(secrets.token_hex(32))" > "$token")
  fi
  local args=(--head --port "$BASE" --dashboard-host 127.0.0.1 --dashboard-port $((BASE + 1))
    --ray-client-server-port $((BASE + 2)) --node-manager-port $((BASE + 3))
    --object-manager-port $((BASE + 4)) --dashboard-agent-listen-port $((BASE + 5))
    --dashboard-agent-grpc-port $((BASE + 6)) --runtime-env-agent-port $((BASE + 7))
    --metrics-export-port $((BASE + 8)) --min-worker-port $((BASE + 100)) --max-worker-port $((BASE + 199))
    --temp-dir "$DIR" --disable-usage-stats)
  [ -n "${GCAD_RAY_CPUS:-}" ] && args+=(--num-cpus "$GCAD_RAY_CPUS")
  [ -n "${GCAD_RAY_GPUS:-}" ] && args+=(--num-gpus "$GCAD_RAY_GPUS")
  echo "[local_cluster] starting Ray head (ports $BASE.., temp dir $DIR)"
  # TMPDIR: the head's processes, its workers and the jobs' drivers put their temporary files (Python's
  # multiprocessing pymp-* folders among them) in $DIR/tmp, which `stop` deletes: a worker killed at stop
  # cannot clean up after itself, and would otherwise leave them in /tmp.
  mkdir -p "$DIR/tmp"
  # setsid: the head's daemons get their own process group, which `stop` signals (and nothing else).
  TMPDIR="$DIR/tmp" RAY_AUTH_MODE=token RAY_AUTH_TOKEN_PATH="$token" setsid ray start "${args[@]}" > "$DIR/start.log" 2>&1 &
  local pid=$!
  if ! wait "$pid"; then
    tail -n 20 "$DIR/start.log" >&2
    # clean up whatever came up
    local left; left=$(group_pids "$pid")
    [ -n "${left// /}" ] && kill -KILL $left 2>/dev/null || true
    die "ray start failed (log: $DIR/start.log); is port $BASE in use? set GCAD_RAY_PORT"
  fi
  cat > "$STATE" <<EOF
GCAD_RAY_PGID=$pid
GCAD_RAY_ADDRESS=http://127.0.0.1:$((BASE + 1))
GCAD_RAY_GCS=127.0.0.1:$BASE
RAY_AUTH_TOKEN_PATH=$token
EOF
  cat <<EOF
Ray head is up.
  job API / dashboard : http://127.0.0.1:$((BASE + 1))   (loopback only)
  GCS address         : $(hostname -I 2>/dev/null | awk '{print $1}'):$BASE  (to add nodes: ray start --address=...)
  auth token          : $token
Submit a pre-training job:
  bash launch/submit.sh --store /abs/path/graph.zarr --workers 1 --out /abs/path/runs/pre
or by hand:
  export RAY_AUTH_MODE=token RAY_AUTH_TOKEN_PATH=$token
  ray job submit --address http://127.0.0.1:$((BASE + 1)) --working-dir . -- python -m gcad_dist.pretrain --help
Stop it with: bash launch/local_cluster.sh stop
EOF
}

status() {
  if ! is_up; then echo "not running (no live head recorded in $STATE)"; return 3; fi
  echo "running: $GCAD_RAY_ADDRESS (process group $GCAD_RAY_PGID)"
  RAY_AUTH_MODE=token RAY_AUTH_TOKEN_PATH="$RAY_AUTH_TOKEN_PATH" ray status --address "$GCAD_RAY_GCS" 2>/dev/null || true
}

stop() {
  if [ ! -f "$STATE" ]; then echo "not running (no $STATE)"; return 0; fi
  # shellcheck disable=SC1090
  . "$STATE"
  local pids; pids=$(group_pids "$GCAD_RAY_PGID")
  if [ -n "${pids// /}" ]; then
    echo "[local_cluster] stopping Ray head (process group $GCAD_RAY_PGID: $(echo $pids | wc -w) processes)"
    kill -TERM $pids 2>/dev/null || true
    for _ in $(seq 1 ${GCAD_RAY_STOP_GRACE:-10}); do
      pids=$(group_pids "$GCAD_RAY_PGID")
      local alive=""
      for p in $pids; do
        [ "$(ps -o stat= -p "$p" 2>/dev/null | cut -c1)" = Z ] || alive="$alive $p"
      done
      [ -z "${alive// /}" ] && break
      sleep 1
    done
    [ -n "${alive// /}" ] && kill -KILL $alive 2>/dev/null || true
  fi
  rm -f "$STATE"
  rm -rf "$DIR/tmp"  # the cluster's own temporary files (see start)
  echo "[local_cluster] stopped"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) status ;;
  *) echo "usage: $0 start|stop|status   (see the comments at the top for the environment variables)" >&2; exit 2 ;;
esac
