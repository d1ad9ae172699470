#!/usr/bin/env bash
# Submit a gcad-dist pre-training job to a running Ray cluster (Ray Jobs API):
#
#   bash launch/submit.sh --store /shared/graph.zarr --workers 4 --gpus-per-worker 1 --out /shared/runs/pre
#
# Every argument goes to `python -m gcad_dist.pretrain` (see its --help). The job runs on the cluster
# in a copy of this repository (--working-dir .), so paths given to it must exist ON THE CLUSTER:
# use absolute paths on shared storage (NFS / EFS mount, or s3:// URLs).
#
# Environment:
#   GCAD_RAY_ADDRESS      job API address (default: RAY_ADDRESS, else the head started by
#                         launch/local_cluster.sh, else http://127.0.0.1:8265). On a `ray up` cluster use
#                         `ray dashboard ray_cluster.yaml` (port-forwards 8265 to this machine).
#   RAY_AUTH_TOKEN_PATH   file with the cluster's auth token (default: the local cluster's, else
#                         ~/.ray/auth_token). RAY_AUTH_TOKEN (the token itself) also works.
#   GCAD_SUBMIT_ARGS      extra options for `ray job submit` (e.g. "--no-wait" or
#                         "--entrypoint-num-cpus 1"), word-split.
#   GCAD_ENTRYPOINT       module to run instead of gcad_dist.pretrain (e.g. gcad_dist.score).
#   GCAD_SUBMIT_TRIES     submissions in all when the cluster's job agent is not up yet (default 6, 10 s apart:
#                         GCAD_SUBMIT_RETRY_SECONDS)
set -euo pipefail
cd "$(dirname "$0")/.."
[ -z "${VIRTUAL_ENV:-}" ] && [ -f .venv/bin/activate ] && . .venv/bin/activate

STATE="${GCAD_RAY_DIR:-/tmp/gcad-ray-${USER:-$(id -u)}}/cluster.env"
LOCAL_ADDRESS=""
if [ -f "$STATE" ]; then
  # shellcheck disable=SC1090
  LOCAL_ADDRESS=$(. "$STATE"; echo "$GCAD_RAY_ADDRESS")
  if [ -z "${RAY_AUTH_TOKEN_PATH:-}" ] && [ -z "${RAY_AUTH_TOKEN:-}" ]; then
    RAY_AUTH_TOKEN_PATH=$(. "$STATE"; echo "$RAY_AUTH_TOKEN_PATH")
    export RAY_AUTH_TOKEN_PATH
  fi
fi
ADDRESS=${GCAD_RAY_ADDRESS:-${RAY_ADDRESS:-${LOCAL_ADDRESS:-http://127.0.0.1:8265}}}
# Ray 2.5x+ clusters use token authentication by default: the client must send the token.
export RAY_AUTH_MODE=${RAY_AUTH_MODE:-token}

if [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then
  awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"
  echo; echo "Options of the job (python -m ${GCAD_ENTRYPOINT:-gcad_dist.pretrain} --help):"
  exec python -m "${GCAD_ENTRYPOINT:-gcad_dist.pretrain}" --help
fi

# A head that has just started (or is busy) may not have its job agent up yet: Ray's job API then answers "No
# available agent to submit job" after 10 s, before any job exists. Such a refusal is retried (GCAD_SUBMIT_TRIES
# submissions in all, GCAD_SUBMIT_RETRY_SECONDS apart); any other outcome is the job's own.
tries=${GCAD_SUBMIT_TRIES:-6}
errlog=$(mktemp)
trap 'rm -f "$errlog"' EXIT
for try in $(seq 1 "$tries"); do
  set +e
  # stdout goes straight through (fd 3); stderr through tee into $errlog, which the pipeline has finished writing
  # when it returns
  # shellcheck disable=SC2086
  { ray job submit --address "$ADDRESS" --working-dir . ${GCAD_SUBMIT_ARGS:-} \
      -- python -m "${GCAD_ENTRYPOINT:-gcad_dist.pretrain}" "$@" 2>&1 1>&3 | tee "$errlog" >&2; } 3>&1
  rc=${PIPESTATUS[0]}
  set -e
  if [ "$rc" -ne 0 ] && [ "$try" -lt "$tries" ] && grep -q "No available agent to submit job" "$errlog"; then
    echo "submit.sh: the cluster's job agent is not up yet; submitting again in ${GCAD_SUBMIT_RETRY_SECONDS:-10} s" \
      "(try $((try + 1)) of $tries)" >&2
    sleep "${GCAD_SUBMIT_RETRY_SECONDS:-10}"
    continue
  fi
  exit "$rc"
done
