#!/usr/bin/env bash
# Training across hosts of our own: network namespaces joined by two bridges, a management network (Open
# MPI's daemons) and a training network (the ranks' collectives, MPI over TCP, never shared memory), the
# run directory shared. Data- and expert-parallel training across two hosts against one process; then
# faults while a long run trains: host 2's training link taken down, its zaya processes frozen (SIGSTOP),
# and host 2 cut off altogether. Each must end the job within run.hang_timeout_s and a few seconds, with
# the reason printed, and the job resumed on the host that is left continues from the last checkpoint.
# Needs root and iproute2; where namespaces cannot be made it says so and is skipped (exit 77), never passed.
# Usage: hosts_test.sh ZAYA_BINARY COMPARE_TENSORS_BINARY CONFIGS_DIR
set -u
zaya=$1 compare=$2 configs=$3
source "$(dirname "$0")/report.sh"
command -v mpirun > /dev/null || { echo "FAIL: mpirun is missing (scripts/setup.sh installs openmpi-bin)"; exit 1; }

tmp=$(mktemp -d)
source "$(dirname "$0")/namespace_hosts.sh"
trap 'remove_hosts; rm -rf "$tmp"' EXIT
make_hosts 2

# Open MPI starts its daemon on a host with this agent (as it would with ssh): the host's management
# address names its namespace. mpirun itself runs on host 1.
cat > "$tmp/agent.sh" <<AGENT
#!/usr/bin/env bash
host=\$1; shift
case \$host in ${management[0]}) ns=$tag-h1 ;; ${management[1]}) ns=$tag-h2 ;; *) echo "agent: unknown host \$host" >&2; exit 1 ;; esac
exec nsenter --net="/run/netns/\$ns" sh -c "\$*"
AGENT
chmod +x "$tmp/agent.sh"
# across ARGS...: mpirun on host 1, one rank on each host; the collectives on the training network, the
# daemons on the management network, and the launcher's keepalive on its daemons set as the README says
# (a daemon cut off is noticed in seconds, not Open MPI's default of 8 minutes).
across() {
  timeout 300 nsenter --net="/run/netns/$tag-h1" mpirun --allow-run-as-root --host "${management[0]},${management[1]}" \
    --mca plm_rsh_agent "$tmp/agent.sh" --mca btl tcp,self --mca pml ob1 \
    --mca btl_tcp_if_include 10.78.0.0/24 --mca oob_tcp_if_include 10.77.0.0/24 \
    --mca oob_tcp_keepalive_time 5 --mca oob_tcp_keepalive_intvl 1 --mca oob_tcp_keepalive_probes 3 -x PATH "$@"
}

source "$(dirname "$0")/tiny_run.sh"

"$zaya" "${args[@]}" --run-dir "$tmp/one" > "$tmp/one.log" 2>&1 || { fail "one process"; tail -5 "$tmp/one.log"; }
for mode in data expert; do
  extra=()
  [ $mode = expert ] && extra=(--set run.expert_parallel=2)
  across "$zaya" "${args[@]}" "${extra[@]}" --run-dir "$tmp/$mode" > "$tmp/$mode.log" 2>&1 \
    && ok "$mode parallel across 2 hosts over TCP" || { fail "$mode parallel across 2 hosts"; tail -5 "$tmp/$mode.log"; }
  out=$(same_losses "$tmp/one" "$tmp/$mode") && ok "$mode parallel: losses equal one process: $out" \
    || fail "$mode parallel losses: $out"
  out=$("$compare" "$(final "$tmp/$mode")" "$(final "$tmp/one")" 1e-5) \
    && ok "$mode parallel: weights equal one process: $out" || fail "$mode parallel weights: $out"
done

# fault NAME HOW WANT: a long run across both hosts, a checkpoint every 5 steps, a hang timeout of 10 s; once
# the first checkpoint is published, HOW breaks host 2 (`training`: its training link down; `freeze`: its
# zaya processes stopped; `cut`: both its links down). The job must end within the timeout and a few
# seconds, with WANT in its log; then the job resumes on host 1 alone.
timeout_s=10
fault() {
  local name=$1 how=$2 want=$3 run=$tmp/$2
  across "$zaya" "${args[@]}" --set stages.0.tokens=4096000 --set checkpoint.every_steps=5 \
    --set run.hang_timeout_s=$timeout_s --run-dir "$run" > "$run.log" 2>&1 &
  local launcher=$!
  for _ in $(seq 600); do [ -f "$run/checkpoints/latest" ] && break; sleep 0.1; done
  [ -f "$run/checkpoints/latest" ] || { fail "$name: no checkpoint before the fault"; tail -5 "$run.log"; return; }
  local broken_at
  broken_at=$(date +%s.%N)
  case $how in
    training) inside "$tag-h2" ip link set eth1 down ;;
    freeze) for pid in $(ip netns pids "$tag-h2"); do
              [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = zaya ] && kill -STOP "$pid"
            done ;;
    cut) inside "$tag-h2" ip link set eth0 down && inside "$tag-h2" ip link set eth1 down ;;
  esac
  wait $launcher
  local code=$?
  local seconds
  seconds=$(awk -v now="$(date +%s.%N)" -v then="$broken_at" 'BEGIN { printf "%.1f", now - then }')
  ip netns pids "$tag-h2" | xargs -r kill -9 2>/dev/null
  inside "$tag-h2" ip link set eth0 up
  inside "$tag-h2" ip link set eth1 up
  if [ $code -ne 0 ] && [ $code -ne 124 ] && grep -q "$want" "$run.log" &&
    awk -v s="$seconds" -v t=$timeout_s 'BEGIN { exit !(s < t + 15) }'; then
    ok "$name: the job ended $seconds s after the fault (exit $code): $(grep -m1 -o "$want.*" "$run.log" | cut -c1-160)"
  else
    fail "$name: exit $code after $seconds s; the log ends:"
    tail -5 "$run.log"
  fi
  # The scheduler's restart, on the host that is left: it resumes from the last checkpoint and trains on
  # (stopped with SIGTERM after a while, which checkpoints where it is).
  local last
  last=$(cat "$run/checkpoints/latest")
  timeout -s TERM 10 "$zaya" "${args[@]}" --set stages.0.tokens=4096000 --set checkpoint.every_steps=5 \
    --set run.hang_timeout_s=$timeout_s --run-dir "$run" > "$run.resume.log" 2>&1
  local reached
  reached=$(cat "$run/checkpoints/latest")
  grep -q "resuming .*$last" "$run.resume.log" && [ "${reached#step_}" -gt "${last#step_}" ] \
    && ok "$name: resumed on one host from $last, reached $reached" \
    || { fail "$name: resume on one host from $last (reached $reached)"; tail -5 "$run.resume.log"; }
}
fault "training link down" training "no progress for"
fault "frozen processes" freeze "no progress for"
fault "host cut off" cut "lost communication with a remote daemon"

report
