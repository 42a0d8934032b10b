# Sourced by the tests and scripts that compare training runs by their run directories: their losses,
# samples and final checkpoints.
# "step loss" lines of a run's training steps (or, with a second argument, of its evaluations).
losses() { grep "\"type\":\"${2:-train}\"" "$1/metrics.jsonl" | sed 's/.*"loss":\([-0-9.e]*\).*"step":\([0-9]*\).*/\2 \1/'; }
sample() { grep '"type":"sample"' "$1/metrics.jsonl" | sed 's/.*"text":\(".*"\),"type".*/\1/'; }
final() { echo "$1/checkpoints/$(cat "$1/checkpoints/latest")"; }  # a model directory
# Steps both runs hold must agree to 1e-5 in loss (training, or evaluation with a third argument); prints
# the worst difference.
same_losses() {
  join <(losses "$1" ${3:-} | sort -k1,1) <(losses "$2" ${3:-} | sort -k1,1) \
    | awk -v bound="${BOUND:-1e-5}" 'BEGIN { worst = 0; n = 0 } { d = $2 - $3; if (d < 0) d = -d; if (d > worst) worst = d; n++ }
           END { printf "%d steps, worst loss difference %.2g\n", n, worst; exit !(n > 0 && worst <= bound) }'
}

