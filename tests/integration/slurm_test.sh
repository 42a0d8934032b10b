#!/usr/bin/env bash
# Slurm, the launcher of our users' clusters: a Slurm cluster of our own from Debian's packages on two hosts
# made of network namespaces (namespace_hosts.sh). munge authenticates; slurmctld runs on host 1; a slurmd
# runs on each host, with its own hostname and its own local temporary directory, as on separate machines;
# Slurm talks over the management network, the ranks' MPI over TCP on the training network. srun without
# --mpi must be refused by every task (each would otherwise train alone). Then it trains with
# the README's line, `srun --mpi=pmix --ntasks 2 --kill-on-bad-exit=1 zaya train ...`, expert-parallel
# across the two hosts, against one process; then takes host 2's training link down mid-run: the job must
# end within run.hang_timeout_s and a few seconds, with the reason printed, and `srun --ntasks 1` resumes
# it from the last checkpoint on the host that is left.
# Needs root and iproute2; where namespaces cannot be made it says so and is skipped (exit 77), never passed.
# Usage: slurm_test.sh ZAYA_BINARY COMPARE_TENSORS_BINARY CONFIGS_DIR
set -u
zaya=$1 compare=$2 configs=$3
source "$(dirname "$0")/report.sh"
for command in munged slurmctld slurmd srun sinfo; do
  command -v $command > /dev/null ||
    { echo "FAIL: $command is missing (scripts/setup.sh installs munge, slurmctld, slurmd and slurm-client)"; exit 1; }
done

tmp=$(mktemp -d)
slurm=$tmp/slurm
source "$(dirname "$0")/namespace_hosts.sh"
trap 'remove_hosts; [ -f "$slurm/munged.pid" ] && kill "$(cat "$slurm/munged.pid")"; rm -rf "$tmp"' EXIT
make_hosts 2

# on HOST COMMAND...: COMMAND on host HOST (1 or 2): its network, and a hostname of its own (hHOST), which
# Slurm's daemons and clients take for the machine's name. Every Slurm command reads our configuration.
export SLURM_CONF=$slurm/slurm.conf
on() {
  local host=$1
  shift
  inside "$tag-h$host" unshare --uts sh -c "hostname h$host && exec \"\$@\"" sh "$@"
}

# munge: one daemon with a key of our own serves both hosts (its socket is a file both see; on a real cluster
# each host runs one with the same key).
mkdir -p "$slurm/state"
dd if=/dev/urandom of="$slurm/munge.key" bs=1024 count=1 status=none
chmod 600 "$slurm/munge.key"
munged --force --key-file="$slurm/munge.key" --socket="$slurm/munge.socket" --pid-file="$slurm/munged.pid" \
  --log-file="$slurm/munged.log" --seed-file="$slurm/munged.seed" --origin=127.0.0.1 ||
  { fail "munged did not start"; tail -3 "$slurm/munged.log"; report; exit; }

# One core per node, so that two tasks are one on each host. TmpFS is each host's own local directory (Slurm
# puts the node's name for %n): Slurm's PMIx server keeps its files there, which would collide if both
# hosts shared one.
cat > "$SLURM_CONF" <<CONF
ClusterName=zaya
SlurmctldHost=h1(${management[0]})
SlurmUser=root
AuthType=auth/munge
AuthInfo=socket=$slurm/munge.socket
CredType=cred/munge
StateSaveLocation=$slurm/state
SlurmdSpoolDir=$slurm/spool-%n
SlurmctldPidFile=$slurm/slurmctld.pid
SlurmdPidFile=$slurm/slurmd-%n.pid
SlurmctldLogFile=$slurm/slurmctld.log
SlurmdLogFile=$slurm/slurmd-%n.log
TmpFS=$slurm/local-%n
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
MpiDefault=none
ReturnToService=2
NodeName=h1 NodeAddr=${management[0]} CPUs=1 State=UNKNOWN
NodeName=h2 NodeAddr=${management[1]} CPUs=1 State=UNKNOWN
PartitionName=hosts Nodes=h1,h2 Default=YES MaxTime=INFINITE State=UP
CONF
on 1 slurmctld || { fail "slurmctld did not start"; tail -3 "$slurm/slurmctld.log"; report; exit; }
for host in 1 2; do
  mkdir -p "$slurm/spool-h$host" "$slurm/local-h$host"
  on $host slurmd -N h$host ||
    { fail "slurmd on host $host did not start"; tail -3 "$slurm/slurmd-h$host.log"; report; exit; }
done
for _ in $(seq 300); do [ "$(on 1 sinfo -h -o %T 2>/dev/null)" = idle ] && break; sleep 0.1; done
state=$(on 1 sinfo -h -o '%N %T' 2>&1)
[ "$state" = "h[1-2] idle" ] && ok "a Slurm cluster of 2 hosts: $state" ||
  { fail "Slurm cluster not up: $state"; tail -3 "$slurm/slurmctld.log" "$slurm"/slurmd-h*.log; report; exit; }
placed=$(on 1 srun --ntasks 2 --label hostname 2>&1 | sort | tr '\n' ' ')
[ "$placed" = "0: h1 1: h2 " ] && ok "srun --ntasks 2 runs one task on each host: $placed" \
  || fail "srun --ntasks 2 placed its tasks as: $placed"

# The ranks' collectives over TCP on the training network (never shared memory), as on separate machines.
export OMPI_MCA_btl=tcp,self OMPI_MCA_pml=ob1 OMPI_MCA_btl_tcp_if_include=10.78.0.0/24
srun_zaya() {  # srun_zaya TASKS ARGS...: the README's srun line, from host 1
  local tasks=$1
  shift
  on 1 timeout 300 srun --mpi=pmix --ntasks "$tasks" --kill-on-bad-exit=1 "$zaya" "$@"
}

source "$(dirname "$0")/tiny_run.sh"

# srun without --mpi (the cluster's MpiDefault is none) starts tasks that know nothing of each other: each
# must refuse, saying why, before it trains or touches the run directory.
on 1 timeout 120 srun --ntasks 2 "$zaya" "${args[@]}" --run-dir "$tmp/no_mpi" > "$tmp/no_mpi.log" 2>&1
code=$?
refused=$(grep -c "srun started 2 tasks without MPI" "$tmp/no_mpi.log")
[ $code -ne 0 ] && [ "$refused" = 2 ] && [ ! -e "$tmp/no_mpi/checkpoints" ] \
  && ok "srun without --mpi: both tasks refuse (exit $code): $(grep -m1 -o "srun started.*" "$tmp/no_mpi.log")" \
  || { fail "srun without --mpi: exit $code, $refused tasks refused"; tail -5 "$tmp/no_mpi.log"; }

"$zaya" "${args[@]}" --run-dir "$tmp/one" > "$tmp/one.log" 2>&1 || { fail "one process"; tail -5 "$tmp/one.log"; }
srun_zaya 2 "${args[@]}" --set run.expert_parallel=2 --run-dir "$tmp/srun" > "$tmp/srun.log" 2>&1 \
  && ok "srun --mpi=pmix: expert- and data-parallel training across 2 hosts" \
  || { fail "srun --mpi=pmix across 2 hosts"; tail -5 "$tmp/srun.log"; }
grep -q "2 data-parallel ranks" "$tmp/srun.log" \
  && ok "zaya took the launch from Slurm's PMIx: $(grep -m1 -o "2 data-parallel ranks.*" "$tmp/srun.log")" \
  || { fail "zaya did not report 2 ranks"; head -5 "$tmp/srun.log"; }
out=$(same_losses "$tmp/one" "$tmp/srun") && ok "srun: losses equal one process: $out" || fail "srun losses: $out"
out=$("$compare" "$(final "$tmp/srun")" "$(final "$tmp/one")" 1e-5) && ok "srun: weights equal one process: $out" \
  || fail "srun weights: $out"

# A long run across both hosts, a checkpoint every 5 steps, a hang timeout of 10 s; once the first checkpoint
# is published, host 2's training link goes down. The rank left waiting reports it and exits, and srun
# (--kill-on-bad-exit) ends the job; then the job resumes on host 1 alone.
timeout_s=10
long=(--set stages.0.tokens=4096000 --set checkpoint.every_steps=5 --set run.hang_timeout_s=$timeout_s
      --run-dir "$tmp/fault")
srun_zaya 2 "${args[@]}" "${long[@]}" > "$tmp/fault.log" 2>&1 &
launcher=$!
for _ in $(seq 600); do [ -f "$tmp/fault/checkpoints/latest" ] && break; sleep 0.1; done
if [ -f "$tmp/fault/checkpoints/latest" ]; then
  broken_at=$(date +%s.%N)
  inside "$tag-h2" ip link set eth1 down
  wait $launcher
  code=$?
  seconds=$(awk -v now="$(date +%s.%N)" -v then="$broken_at" 'BEGIN { printf "%.1f", now - then }')
  if [ $code -ne 0 ] && [ $code -ne 124 ] && grep -q "no progress for" "$tmp/fault.log" &&
    awk -v s="$seconds" -v t=$timeout_s 'BEGIN { exit !(s < t + 15) }'; then
    ok "training link down: srun ended $seconds s after the fault (exit $code): $(grep -m1 -o "no progress for.*" \
      "$tmp/fault.log" | cut -c1-160)"
  else
    fail "training link down: exit $code after $seconds s; the log ends:"
    tail -5 "$tmp/fault.log"
  fi
  last=$(cat "$tmp/fault/checkpoints/latest")
  # The scheduler's restart on the host that is left, stopped with SIGTERM after a while (which checkpoints).
  on 1 timeout -s TERM 10 srun --mpi=pmix --ntasks 1 --kill-on-bad-exit=1 "$zaya" "${args[@]}" "${long[@]}" \
    > "$tmp/resume.log" 2>&1
  reached=$(cat "$tmp/fault/checkpoints/latest")
  grep -q "resuming .*$last" "$tmp/resume.log" && [ "${reached#step_}" -gt "${last#step_}" ] \
    && ok "training link down: resumed with srun --ntasks 1 from $last, reached $reached" \
    || { fail "resume with srun --ntasks 1 from $last (reached $reached)"; tail -5 "$tmp/resume.log"; }
else
  fail "no checkpoint before the fault"
  tail -5 "$tmp/fault.log"
  kill $launcher
fi

report
