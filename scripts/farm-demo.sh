#!/usr/bin/env bash
# make farm-demo: a farm on loopback (README "Jobs on a farm"): a throwaway PostgreSQL 15 (initdb in
# a temp dir, trust auth on 127.0.0.1, run as the `postgres` user when this runs as root), two
# kilnd replicas and two workers (`kilnd --role worker`) on it. Uploads a model through one replica,
# submits jobs through both, watches one through the other replica, kills a worker with -9 in the
# middle of a job, and shows `kiln devices` (the farm's workers, one of them lost) and the jobs.
# Everything is stopped and removed at the end.
set -euo pipefail
BUILD_DIR=${1:-build}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
[[ "$BUILD_DIR" == /* ]] || BUILD_DIR="$ROOT/$BUILD_DIR"  # relative to the repository, or absolute
KILND="$BUILD_DIR/server/kilnd"
KILN="$BUILD_DIR/cli/kiln"
PGBIN=/usr/lib/postgresql/15/bin
WORK=$(mktemp -d /tmp/kiln-farm-demo.XXXXXX)
PIDS=()
PG_UP=""

as_pg() {
  if [[ $(id -u) -eq 0 ]]; then runuser -u postgres -- "$@"; else "$@"; fi
}
cleanup() {
  for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  if [[ -n "$PG_UP" ]]; then as_pg "$PGBIN/pg_ctl" -D "$WORK/pg" -m immediate stop >/dev/null 2>&1 || true; fi
  rm -rf "$WORK"
}
trap cleanup EXIT
step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

step "PostgreSQL 15 in $WORK/pg"
[[ -x "$PGBIN/initdb" ]] || { echo "postgresql-15 is not installed: run scripts/install-deps.sh"; exit 1; }
if [[ $(id -u) -eq 0 ]]; then chown postgres "$WORK"; fi
as_pg "$PGBIN/initdb" -D "$WORK/pg" -U kiln -A trust -E UTF8 --locale=C --no-sync --no-instructions >"$WORK/initdb.log"
PGPORT=$(free_port)
as_pg "$PGBIN/pg_ctl" -D "$WORK/pg" -l "$WORK/pg.log" -w \
  -o "-c listen_addresses=127.0.0.1 -p $PGPORT -k $WORK -c fsync=off" start >/dev/null
PG_UP=1
as_pg "$PGBIN/createdb" -h 127.0.0.1 -p "$PGPORT" -U kiln kiln
export KILN_DATABASE="postgresql://kiln@127.0.0.1:$PGPORT/kiln"
echo "KILN_DATABASE=$KILN_DATABASE"

# start NAME ARGS...: a kilnd on the farm's database; sets NAME_GRPC and NAME_PID.
start() {
  local name=$1
  shift
  mkfifo "$WORK/$name.out"
  "$KILND" --listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 --data-dir "$WORK/$name" \
    --job-lease-seconds 2 --job-heartbeat-seconds 0.5 --log-level warn "$@" \
    >"$WORK/$name.out" 2>"$WORK/$name.log" &
  local pid=$!
  PIDS+=("$pid")
  local line
  exec {fd}<"$WORK/$name.out"
  if ! read -r -t 30 line <&"$fd"; then echo "$name did not start:"; cat "$WORK/$name.log"; exit 1; fi
  printf -v "${name}_GRPC" '%s' "$(sed -n 's/.*grpc=\([^ ]*\).*/\1/p' <<<"$line")"
  printf -v "${name}_PID" '%s' "$pid"
  echo "$name: $line"
}

step "two replicas and two workers (leases of 2 s, renewed every 0.5 s)"
start a
start b
start w1 --role worker --devices tt-emu:1
start w2 --role worker --devices tt-emu:1

step "kiln upload through replica a"
"$KILN" --server "$a_GRPC" upload "$ROOT/examples/models/unet_small.onnx" 2>/dev/null

step "6 jobs: 3 through a, 3 through b (kiln run --detach)"
IDS=()
for i in 1 2 3 4 5 6; do
  server=$a_GRPC
  [[ $((i % 2)) -eq 0 ]] && server=$b_GRPC
  IDS+=("$("$KILN" --server "$server" run unet_small --backend tt-emu --detach 2>/dev/null | tail -1)")
done
printf '%s\n' "${IDS[@]}"

step "kill -9 worker w1 while jobs run: its job's lease expires and w2 runs it again"
sleep 0.5
kill -KILL "$w1_PID"
wait "$w1_PID" 2>/dev/null || true
echo "killed w1 (pid $w1_PID)"

step "kiln watch ${IDS[0]} through replica b (it was submitted to a)"
"$KILN" --server "$b_GRPC" watch "${IDS[0]}" 2>&1 | tail -4 || true

step "kiln jobs (every job once, some on attempt 2)"
for id in "${IDS[@]}"; do "$KILN" --server "$b_GRPC" watch "$id" >/dev/null 2>&1 || true; done
"$KILN" --server "$a_GRPC" jobs

step "kiln devices through replica b (the farm's workers: w2 live, w1 lost)"
sleep 2.5
"$KILN" --server "$b_GRPC" devices

step "stopping (SIGTERM: the workers drain, the replicas stop)"
for p in "$w2_PID" "$a_PID" "$b_PID"; do kill -TERM "$p"; wait "$p" || echo "pid $p exited $?"; done
PIDS=()
