# start_server NAME ARGS...: starts `$zaya serve` on the model in $tmp/model and a free port, its log in
# $tmp/NAME.log; sets $port (0 when it did not start) and $server_pid, and adds the pid to $pids (which the
# sourcing test kills on exit). Sourced by the serve tests.
start_server() {
  local name=$1
  shift
  "$zaya" serve --model "$tmp/model" --port 0 "$@" 2> "$tmp/$name.log" &
  pids+=($!)
  server_pid=$!
  port=0
  for _ in $(seq 100); do
    port=$(grep -o 'listening on http://127.0.0.1:[0-9]*' "$tmp/$name.log" | grep -o '[0-9]*$')
    [ -n "$port" ] && return
    sleep 0.1
  done
  port=0
  cat "$tmp/$name.log"
}
