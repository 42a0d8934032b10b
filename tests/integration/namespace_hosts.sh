# Sourced by the tests that run across hosts of our own (hosts_test.sh, slurm_test.sh), after report.sh with
# $tmp set: `make_hosts N` makes N hosts as network namespaces, each on two networks joined by bridges in a
# namespace of their own, a management network (launchers and daemons: eth0, ${management[i]}) and a training
# network (the ranks' collectives: eth1, ${training[i]}). Where namespaces cannot be made it says so and
# the test is skipped (exit 77), never passed. `remove_hosts` kills what runs in them and removes them.
tag=z$$  # this run's namespaces: zNNN-sw (the two bridges), zNNN-h1, zNNN-h2, ...
management=() training=()
hosts=0
skip() { echo "skipped: $1"; exit 77; }
# inside NS COMMAND...: COMMAND in namespace NS's network (nsenter, not `ip netns exec`, which remounts / and fails
# in a chroot such as the fresh-machine check's).
inside() { local ns=$1; shift; nsenter --net="/run/netns/$ns" "$@"; }

make_hosts() {
  [ "$(id -u)" = 0 ] || skip "network namespaces need root"
  command -v ip > /dev/null || skip "no iproute2 (ip)"
  command -v nsenter > /dev/null || skip "no nsenter (util-linux)"
  ip netns add "$tag-sw" 2>/dev/null || skip "cannot create a network namespace here (no CAP_SYS_ADMIN?)"
  hosts=$1
  inside "$tag-sw" ip link add br0 type bridge 2>/dev/null || skip "cannot create a bridge in a namespace"
  inside "$tag-sw" ip link add br1 type bridge
  inside "$tag-sw" ip link set br0 up
  inside "$tag-sw" ip link set br1 up
  local i n ns
  for i in $(seq "$hosts"); do
    ns=$tag-h$i
    management+=("10.77.0.$i") training+=("10.78.0.$i")
    ip netns add "$ns"
    inside "$ns" ip link set lo up
    for n in 0 1; do
      ip link add "$tag-$n$i" type veth peer name "eth$n" netns "$ns"
      ip link set "$tag-$n$i" netns "$tag-sw"
      inside "$tag-sw" ip link set "$tag-$n$i" master "br$n" up
    done
    inside "$ns" ip addr add "10.77.0.$i/24" dev eth0
    inside "$ns" ip addr add "10.78.0.$i/24" dev eth1
    inside "$ns" ip link set eth0 up
    inside "$ns" ip link set eth1 up
  done
  ok "$hosts hosts, each on a management (10.77.0.0/24) and a training (10.78.0.0/24) network"
}

remove_hosts() {
  local ns
  for ns in $(seq -f "$tag-h%g" "$hosts") "$tag-sw"; do
    ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null
    ip netns del "$ns" 2>/dev/null
  done
}
