#!/usr/bin/env bash
# Speed on a machine where another process holds a core. Run it on an otherwise quiet machine.
#
# bench/busy_neighbour.sh step [ZAYA] [PRESET] [BATCH] [SEQ] [STEPS] [THREADS]
#   `zaya bench step` tokens/s alone on N threads and on N - 1, then both again beside one busy-loop process
#   (the thread governor drops N to N - 1 while the neighbour runs). Medians of STEPS steps.
# bench/busy_neighbour.sh train [ZAYA] [THREADS] [STEPS] [MEDIUM_STEPS]
#   `zaya train` of tiny, small (the demo's config) and medium (small's recipe on the medium preset, whose
#   Muon step alone takes half a minute), each in fp32 and bf16: tokens/s alone on N - 1 threads against
#   beside a busy process on N threads (the default settings), each the median of a run's step rates past its
#   first 2 steps (tiny's config whole, STEPS steps of small, MEDIUM_STEPS of medium), as a table. Beside the
#   neighbour the run should be as fast: the governor gives up the core the neighbour holds.
set -eu
mode=${1:-step}
shift || true

step_bench() {
  local zaya=${1:-build/src/zaya} preset=${2:-small} batch=${3:-16} seq=${4:-512} steps=${5:-12}
  local threads=${6:-$(nproc)}
  rate() {
    "$zaya" --threads "$1" bench step --preset "$preset" --batch "$batch" --seq "$seq" --steps "$steps" --json \
      | sed -n 's/.*"tokens_per_second":\([0-9.e+]*\).*/\1/p' | xargs printf '%.0f\n'
  }
  local alone fewer loaded loaded_fewer busy
  alone=$(rate "$threads")
  fewer=$(rate $((threads - 1)))
  (while :; do :; done) &
  busy=$!
  trap 'kill $busy 2>/dev/null' EXIT
  loaded=$(rate "$threads")
  loaded_fewer=$(rate $((threads - 1)))
  kill $busy
  printf '%s, batch %s x %s, tokens/s alone: %s threads %s, %s threads %s; beside a busy process: %s threads %s, %s threads %s\n' \
    "$preset" "$batch" "$seq" "$threads" "$alone" $((threads - 1)) "$fewer" "$threads" "$loaded" $((threads - 1)) "$loaded_fewer"
}

train_bench() {
  local zaya=${1:-build/src/zaya} threads=${2:-$(nproc)} steps=${3:-12} medium_steps=${4:-4}
  local configs
  configs=$(cd "$(dirname "$0")/../configs" && pwd)
  local work
  work=$(mktemp -d)
  trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$work"' EXIT
  "$zaya" tokenizer train --input /usr/share/doc/python3.11/html/_sources --vocab-size 4096 \
    --output "$work/tokenizer.json" > /dev/null 2>&1
  "$zaya" prepare --tokenizer "$work/tokenizer.json" --input /usr/share/doc/python3.11/html/_sources \
    --output "$work/docs" --val-fraction 0.02 > /dev/null 2>&1
  # The data: the tokenizer, and the Python docs as the mixture of each of the config's first $1 stages.
  data() {
    local args=(--set "data.tokenizer=\"$work/tokenizer.json\"")
    for ((stage = 0; stage < $1; ++stage)); do args+=(--set "stages.$stage.mixture={\"$work/docs_train\" = 1.0}"); done
    printf '%s\0' "${args[@]}"
  }
  local quiet=(--set 'data.validation=""' --set eval.every_steps=0 --set sample.every_steps=0
               --set sample.max_new_tokens=0 --set checkpoint.every_steps=0)
  # small's recipe cut to $1 steps of its first stage (16 sequences of 256 tokens), and the stages after it
  # to one step each.
  short() {
    printf '%s\0' --set "stages.0.tokens=$(($1 * 4096))" --set stages.1.tokens=8192 --set stages.2.tokens=16384 \
      --set batch.ramp_tokens=0 --set batch.sequences=16
  }
  # tokens/s of a finished run: the median of its step rates past the first 2.
  rate() {
    grep '"type":"train"' "$1/metrics.jsonl" | sed -n 's/.*"tokens_per_second":\([0-9.e+]*\).*/\1/p' | tail -n +3 \
      | sort -g | awk '{ v[NR] = $1 } END { printf "%.0f", NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
  }
  printf '| model | precision | alone, %s thread(s) | beside a busy process, %s threads | ratio |\n' \
    $((threads - 1)) "$threads"
  printf '| --- | --- | --- | --- | --- |\n'
  local model precision args alone loaded neighbour
  for model in tiny small medium; do
    for precision in fp32 bf16; do
      case $model in
        tiny) mapfile -d '' args < <(data 2) && args=("$configs/tiny.toml" "${args[@]}") ;;
        small) mapfile -d '' args < <(data 3; short "$steps") && args=("$configs/small.toml" "${args[@]}") ;;
        medium) mapfile -d '' args < <(data 3; short "$medium_steps")
                args=("$configs/small.toml" "${args[@]}" --set 'model.preset="medium"' --set model.vocab_size=32768) ;;
      esac
      args+=("${quiet[@]}" --set "run.precision=\"$precision\"")
      rm -rf "$work/alone" "$work/loaded"
      "$zaya" train "${args[@]}" --set run.threads=$((threads - 1)) --run-dir "$work/alone" > /dev/null 2>&1
      timeout 3600 bash -c 'while :; do :; done' &
      neighbour=$!
      "$zaya" train "${args[@]}" --run-dir "$work/loaded" > /dev/null 2>&1
      kill $neighbour
      alone=$(rate "$work/alone")
      loaded=$(rate "$work/loaded")
      printf '| %s | %s | %s | %s | %s |\n' "$model" "$precision" "$alone" "$loaded" \
        "$(awk -v a="$alone" -v b="$loaded" 'BEGIN { printf "%.2f", b / a }')"
    done
  done
}

case $mode in
  step) step_bench "$@" ;;
  train) train_bench "$@" ;;
  *) echo "usage: bench/busy_neighbour.sh step|train [...] (see the comment at its top)" >&2; exit 2 ;;
esac
