#!/usr/bin/env bash
# `zaya train` end to end on the tiny config, as a user runs it: a tokenizer and datasets made from a slice
# of the Python documentation, training that learns (loss well below the unigram entropy), kill -9 and
# resume to byte-identical weights beside a busy process, kills during checkpoint writes, SIGTERM, NaN steps,
# config errors (each with its exit code), export (never over a model or its checkpoint; past a damaged
# `latest`) and generation.
# Usage: train_test.sh ZAYA_BINARY CONFIGS_DIR
set -u
zaya=$1 configs=$2
tmp=$(mktemp -d)
trap 'kill -9 $(jobs -p) 2>/dev/null; rm -rf "$tmp"' EXIT
source "$(dirname "$0")/report.sh"

docs=/usr/share/doc/python3.11/html/_sources
[ -d "$docs" ] || { echo "FAIL: $docs is missing (scripts/setup.sh installs python3.11-doc)"; exit 1; }
mkdir -p "$tmp/corpus"
cp "$docs"/library/[a-f]*.rst.txt "$tmp/corpus/" 2>/dev/null || cp "$docs"/library/[a-f]*.rst "$tmp/corpus/"

"$zaya" tokenizer train --input "$tmp/corpus" --vocab-size 512 --output "$tmp/tokenizer.json" > "$tmp/log" 2>&1 \
  && ok "tokenizer train" || { fail "tokenizer train"; cat "$tmp/log"; exit 1; }
"$zaya" prepare --tokenizer "$tmp/tokenizer.json" --input "$tmp/corpus" --output "$tmp/docs" --val-fraction 0.05 \
  > "$tmp/log" 2>&1 && ok "prepare" || { fail "prepare"; cat "$tmp/log"; exit 1; }
# A 31 MB line under a 700 MB memory limit: a clear error naming the file, nothing half-written left (an
# out-of-memory inside the tokenising threads used to end the process with the temporary files in place).
mkdir -p "$tmp/long"
yes "alpha beta gamma" | head -c 31000000 | tr -d '\n' > "$tmp/long/line.txt"
out=$( (ulimit -v 700000; "$zaya" prepare --tokenizer "$tmp/tokenizer.json" --input "$tmp/long/line.txt" \
  --output "$tmp/long/out") 2>&1)
[ $? -eq 1 ] && grep -q "line.txt.*out of memory" <<<"$out" && [ "$(ls "$tmp/long")" = "line.txt" ] \
  && ok "prepare out of memory: a clear error, nothing left behind" || fail "prepare out of memory: $out; $(ls "$tmp/long")"
entropy=$("$zaya" inspect "$tmp/docs_train" | sed -n 's/^unigram entropy: \([0-9.]*\) nats.*/\1/p')
# zaya prepare killed at each of its commits (strace kills it as it enters the Nth rename: a .bin or .idx
# about to take its final name), writing anew and over an older dataset: every dataset left with an index is
# byte for byte the finished one (the new or, over an older one, the old), and a .bin without its index is
# refused; what is unfinished keeps its temporary name. Then a run into the same place finishes as if alone.
prepare_into() { "$zaya" prepare --tokenizer "$tmp/tokenizer.json" --input "$1" --output "$2" --val-fraction 0.05; }
mkdir -p "$tmp/kill/small"
cp "$tmp"/corpus/a*.txt "$tmp/kill/small/" 2>/dev/null || cp "$tmp"/corpus/a* "$tmp/kill/small/"
prepare_into "$tmp/kill/small" "$tmp/kill/old" > /dev/null 2>&1
commits=$(strace -f -qq -e trace=rename -o "$tmp/kill/trace" "$zaya" prepare --tokenizer "$tmp/tokenizer.json" \
  --input "$tmp/corpus" --output "$tmp/kill/new" --val-fraction 0.05 > /dev/null 2>&1; grep -c "rename(" "$tmp/kill/trace")
bad=""
for over in none old; do
  for n in $(seq 1 "$commits"); do
    rm -rf "$tmp/kill/run" && mkdir "$tmp/kill/run"
    # Copied with their times: the dataset's record (PREFIX.zaya.json) still describes them, and they stay zaya's.
    [ $over = old ] && for f in "$tmp"/kill/old_*; do cp -p "$f" "$tmp/kill/run/docs${f##*/old}"; done
    { strace -f -qq -o /dev/null -e trace=rename -e inject=rename:signal=KILL:when=$n \
      "$zaya" prepare --tokenizer "$tmp/tokenizer.json" --input "$tmp/corpus" --output "$tmp/kill/run/docs" \
      --val-fraction 0.05 > /dev/null; } 2>/dev/null  # and bash's own "Killed"
    for part in train val; do
      at=$tmp/kill/run/docs_$part
      if [ -e "$at.idx" ]; then
        { cmp -s "$at.idx" "$tmp/kill/new_$part.idx" && cmp -s "$at.bin" "$tmp/kill/new_$part.bin"; } ||
          { cmp -s "$at.idx" "$tmp/kill/old_$part.idx" && cmp -s "$at.bin" "$tmp/kill/old_$part.bin"; } ||
          bad="$bad $over/$n/$part:mixed"
      elif [ -e "$at.bin" ]; then
        "$zaya" inspect "$at" > /dev/null 2>&1 && bad="$bad $over/$n/$part:bin-accepted"
      fi
    done
  done
done
prepare_into "$tmp/corpus" "$tmp/kill/run/docs" > /dev/null 2>&1 && cmp -s "$tmp/kill/run/docs_train.bin" \
  "$tmp/kill/new_train.bin" || bad="$bad rerun"
[ "$commits" -eq 6 ] && [ -z "$bad" ] && ok "prepare killed at each of its $commits commits: nothing mistakable" \
  || fail "prepare killed at its commits ($commits):$bad"

set_data=(--set "data.tokenizer=\"$tmp/tokenizer.json\"" --set "data.validation=\"$tmp/docs_val\""
          --set "stages.0.mixture={\"$tmp/docs_train\" = 1.0}" --set "stages.1.mixture={\"$tmp/docs_train\" = 1.0}")
# Default settings (the thread governor on): runs here are compared bit for bit, whatever else ctest -j runs.
train=("$zaya" train "$configs/tiny.toml" "${set_data[@]}")
train() { "${train[@]}" "$@"; }  # in the background use "${train[@]}" itself, so that $! is zaya's pid

# 0. A run that cannot fit in memory is refused before it allocates: the plan, the setting to change, exit 2.
# (8M tokens a micro-batch: about 120 GB of activations for tiny.)
out=$(train --run-dir "$tmp/huge" --set batch.micro_batch=65536 --set batch.start_sequences=65536 --set batch.sequences=65536 2>&1)
code=$?
if [ $code -eq 2 ] && grep -q "field 'batch.micro_batch': a rank needs .* GiB, more than its .* GiB (the plan above): lower batch.micro_batch to at most" <<<"$out" \
   && grep -q "activations (one micro-batch)" <<<"$out" && [ ! -e "$tmp/huge/checkpoints" ]; then
  ok "a run that does not fit is refused with its memory plan"
else
  fail "a run too large for memory: exit $code"; echo "$out" | tail -5
fi

# 1. A whole run: it learns.
train --run-dir "$tmp/a" > "$tmp/a.log" 2>&1 && ok "tiny run" || { fail "tiny run"; tail -5 "$tmp/a.log"; }
final=$(grep '"type":"eval"' "$tmp/a/metrics.jsonl" | tail -1 | sed 's/.*"loss":\([0-9.]*\).*/\1/')
if awk -v l="$final" -v h="$entropy" 'BEGIN { exit !(l > 0 && l < 0.8 * h) }'; then
  ok "validation loss $final is well below the unigram entropy $entropy"
else
  fail "validation loss $final against unigram entropy $entropy"
fi
[ -f "$(ls -d "$tmp"/a/tb/events.out.tfevents.* | head -1)" ] && ok "TensorBoard events" || fail "TensorBoard events"
grep -q "finished at step" "$tmp/a.log" && ok "finish line" || fail "finish line"
train --run-dir "$tmp/a" > "$tmp/again.log" 2>&1 && grep -q "nothing to do" "$tmp/again.log" \
  && ok "a finished run reports itself" || fail "a finished run reports itself"

# 2. kill -9 at a random moment after the first checkpoint, resume: the same weights to the byte. Beside a
# process that keeps a core busy, so that the governor moves the run between thread counts.
timeout 120 bash -c 'while :; do :; done' &
neighbour=$!
"${train[@]}" --run-dir "$tmp/b" > "$tmp/b.log" 2>&1 &
pid=$!
while [ ! -f "$tmp/b/checkpoints/latest" ] && kill -0 $pid 2>/dev/null; do sleep 0.05; done
sleep "0.$((RANDOM % 9))"
kill -9 $pid 2>/dev/null
wait $pid 2>/dev/null
train --run-dir "$tmp/b" > "$tmp/b2.log" 2>&1 && grep -q "resuming" "$tmp/b2.log" && ok "resume after kill -9" \
  || fail "resume after kill -9"
kill $neighbour
if cmp -s "$tmp/a/checkpoints/$(cat "$tmp/a/checkpoints/latest")/model.safetensors" \
          "$tmp/b/checkpoints/$(cat "$tmp/b/checkpoints/latest")/model.safetensors"; then
  ok "weights after kill -9 and resume are byte-identical to the uninterrupted run"
else
  fail "weights after kill -9 and resume differ from the uninterrupted run"
fi

# 3. Kills in the middle of checkpoint writes (one every step) never leave the run without a loadable one.
for attempt in 1 2 3 4; do
  "${train[@]}" --run-dir "$tmp/c" --set checkpoint.every_steps=1 > /dev/null 2>&1 &
  pid=$!
  sleep "0.$((2 + RANDOM % 8))"
  kill -9 $pid 2>/dev/null
  wait $pid 2>/dev/null
  if [ -f "$tmp/c/checkpoints/latest" ]; then
    "$zaya" export --checkpoint "$tmp/c" --out "$tmp/c-export-$attempt" > /dev/null 2>&1 && ok "kill $attempt: a loadable checkpoint" \
      || fail "kill $attempt: no loadable checkpoint"
  fi
done

# 4. SIGTERM: the step finishes, a checkpoint is written, exit 75 (stopped: the same command resumes).
short=(--set stages.0.tokens=12000 --set stages.1.tokens=4000)
"${train[@]}" --run-dir "$tmp/d" --set checkpoint.every_steps=5 > "$tmp/d.log" 2>&1 &
pid=$!
while [ ! -f "$tmp/d/checkpoints/latest" ] && kill -0 $pid 2>/dev/null; do sleep 0.05; done
kill -TERM $pid
wait $pid
code=$?
[ $code -eq 75 ] && grep -q "stopped at step" "$tmp/d.log" && ok "SIGTERM stops with a checkpoint and exit 75" \
  || fail "SIGTERM: exit $code"
train --run-dir "$tmp/d" --set checkpoint.every_steps=5 > "$tmp/d2.log" 2>&1 && grep -q "resuming" "$tmp/d2.log" \
  && ok "the stopped run resumes and finishes (exit 0)" || fail "the stopped run: $(tail -1 "$tmp/d2.log")"

# 5. Non-finite steps: one is skipped and logged; too many in a row stop the run naming the checkpoint.
train --run-dir "$tmp/e" "${short[@]}" --set "debug.nan_steps=[3]" > "$tmp/e.log" 2>&1 \
  && grep skipped_step "$tmp/e/metrics.jsonl" | grep -q '"step":3,' && ok "a NaN step is skipped" \
  || fail "a NaN step is skipped"
train --run-dir "$tmp/f" "${short[@]}" --set "debug.nan_steps=[22,23,24]" --set log.max_bad_steps=3 > "$tmp/f.log" 2>&1
code=$?
[ $code -eq 3 ] && grep -q "last good checkpoint is .*step_20" "$tmp/f.log" && ok "too many NaN steps stop the run (exit 3)" \
  || { fail "too many NaN steps: exit $code"; tail -3 "$tmp/f.log"; }

# 6. Configuration errors name the file, line and key, and exit 2 (bad input: nothing was trained).
printf '[optimizer]\nlearning_rate = 1\n' > "$tmp/bad.toml"
out=$("$zaya" train "$tmp/bad.toml" --run-dir "$tmp/g" 2>&1)
[ $? -eq 2 ] && grep -q "bad.toml" <<<"$out" && ok "a config error is one line naming the file" \
  || fail "config error: $out"
out=$(train --run-dir "$tmp/g" --set optimizer.lr=-1 2>&1)
[ $? -eq 2 ] && grep -q "^zaya: error: --set optimizer.lr: field 'optimizer.lr'" <<<"$out" && ! grep -q "tiny.toml" <<<"$out" \
  && ok "a bad --set value names the override, not the file" || fail "bad --set: $out"
out=$(train --run-dir "$tmp/g" --set run.device=tpu 2>&1)
[ $? -eq 2 ] && grep -q "field 'run.device'" <<<"$out" && ok "an unknown run.device names the key" \
  || fail "run.device=tpu: $out"
# No build links the HIP backend yet, and no CI machine has a GPU: asking for one is a one-line error that
# names the file and the key, before anything is written.
out=$(train --run-dir "$tmp/h" --set run.device=hip 2>&1)
[ $? -eq 2 ] && grep -q "field 'run.device'" <<<"$out" && [ "$(wc -l <<<"$out")" -eq 1 ] && [ ! -e "$tmp/h/checkpoints" ] \
  && ok "a GPU that is not here: one line naming run.device" || fail "run.device=hip: $out"

# 6b. Everything is checked before the first step, and a late error loses no work.
# An error between steps (here injected at the start of step 13) writes a checkpoint before the run fails.
out=$(train --run-dir "$tmp/r" "${short[@]}" --set checkpoint.every_steps=5 --set debug.fail_step=13 2>&1)
code=$?
[ $code -eq 1 ] && grep -q "injected failure at step 13.*saved in .*step_12" <<<"$out" && [ -d "$tmp/r/checkpoints/step_12" ] \
  && ok "an error between steps: a checkpoint of step 12 first, then exit 1" || fail "an error between steps: exit $code: $(tail -2 <<<"$out")"
# Resuming with a model other than the checkpoint's, or another tokenizer: refused, the field named.
out=$(train --run-dir "$tmp/r" "${short[@]}" --set model.preset=\"small\" 2>&1)
[ $? -eq 2 ] && grep -q "hidden_size" <<<"$out" && [ "$(wc -l <<<"$out")" -eq 1 ] \
  && ok "resume with another model: refused naming the field" || fail "resume with another model: $out"
"$zaya" tokenizer train --input "$tmp/kill/small" --vocab-size 512 --output "$tmp/tokenizer2.json" > /dev/null 2>&1
out=$(train --run-dir "$tmp/r" "${short[@]}" --set "data.tokenizer=\"$tmp/tokenizer2.json\"" 2>&1)
[ $? -eq 2 ] && grep -q "data.tokenizer" <<<"$out" && grep -q "tokenizer2.json" <<<"$out" \
  && ok "resume with another tokenizer: refused" || fail "resume with another tokenizer: $out"
# What may change between restarts is applied, and logged.
out=$(train --run-dir "$tmp/r" "${short[@]}" --set optimizer.lr=0.008 2>&1)
[ $? -eq 0 ] && grep -q "settings changed.*optimizer.lr: 0.01 -> 0.008" <<<"$out" && grep -q '"settings_changed"' "$tmp/r/metrics.jsonl" \
  && ok "resume with another learning rate: applied and logged" || fail "resume with another lr: $(grep -i settings <<<"$out")"
# A dataset made with another tokenizer of the same size: refused before the first step, naming both.
"$zaya" prepare --tokenizer "$tmp/tokenizer2.json" --input "$tmp/kill/small" --output "$tmp/docs2" > /dev/null 2>&1
out=$(train --run-dir "$tmp/s" --set "stages.0.mixture={\"$tmp/docs2_train\" = 1.0}" 2>&1)
[ $? -eq 2 ] && grep -q "docs2_train.*tokenizer2.json.*tokenizer.json" <<<"$out" && [ ! -e "$tmp/s/checkpoints" ] \
  && ok "a dataset of another tokenizer: refused naming both" || fail "a dataset of another tokenizer: $out"
# A run directory holding someone's files, and no run: refused, nothing written there.
mkdir -p "$tmp/u" && echo "thesis draft" > "$tmp/u/thesis.tex"
out=$(train --run-dir "$tmp/u" 2>&1)
[ $? -eq 2 ] && grep -q "field '--run-dir'.*holds thesis.tex" <<<"$out" && [ "$(ls -A "$tmp/u")" = "thesis.tex" ] \
  && ok "a run directory with a user's file: refused, untouched" || fail "a run directory with a user's file: $out; $(ls -A "$tmp/u")"
# A validation set from elsewhere (no record) with ids beyond the model's vocabulary: found before step 1.
"$zaya" tokenizer train --input "$tmp/corpus" --vocab-size 1024 --output "$tmp/tokenizer3.json" > /dev/null 2>&1
"$zaya" prepare --tokenizer "$tmp/tokenizer3.json" --input "$tmp/kill/small" --output "$tmp/docs3" > /dev/null 2>&1
rm "$tmp/docs3_train.zaya.json"
out=$(train --run-dir "$tmp/v" --set "data.validation=\"$tmp/docs3_train\"" 2>&1)
[ $? -eq 2 ] && grep -q "docs3_train.*outside the .*vocabulary" <<<"$out" && [ ! -e "$tmp/v/checkpoints" ] \
  && ok "a validation set beyond the vocabulary: refused before step 1" || fail "a validation set beyond the vocabulary: $out"

# 7. Export and generation.
"$zaya" export --checkpoint "$tmp/a" --out "$tmp/model" > /dev/null 2>&1 && [ -f "$tmp/model/tokenizer.json" ] \
  && ok "export" || fail "export"
"$zaya" export --checkpoint "$tmp/a" --out "$tmp/model" > /dev/null 2>&1 && ok "export again over its own export" \
  || fail "export over its own export"
# What zaya did not write is never deleted or replaced: a user's file refuses the directory (kept with
# --force), and a sharded model of someone else's (shards and index, no config.json) is refused even with
# --force, every file intact.
echo "my notes" > "$tmp/model/NOTES.md"
out=$("$zaya" export --checkpoint "$tmp/a" --out "$tmp/model" 2>&1)
[ $? -eq 1 ] && grep -q "NOTES.md that zaya did not write.*--force" <<<"$out" && ok "export refuses a directory with a user's file" \
  || fail "export over a user's file: $out"
"$zaya" export --checkpoint "$tmp/a" --out "$tmp/model" --force > /dev/null 2>&1 && [ "$(cat "$tmp/model/NOTES.md")" = "my notes" ] \
  && ok "export --force keeps the user's file" || fail "export --force: $(ls "$tmp/model")"
mkdir -p "$tmp/sharded"
for i in 1 2 3; do head -c 1000 /dev/urandom > "$tmp/sharded/model-0000$i-of-00003.safetensors"; done
echo '{"weight_map": {}}' > "$tmp/sharded/model.safetensors.index.json"
(cd "$tmp/sharded" && sha256sum -- * > "$tmp/sharded.sums")
for force in "" --force; do
  out=$("$zaya" export --checkpoint "$tmp/a" --out "$tmp/sharded" $force 2>&1)
  [ $? -eq 1 ] && grep -q "did not write" <<<"$out" && (cd "$tmp/sharded" && sha256sum -c --quiet "$tmp/sharded.sums") \
    && [ "$(ls "$tmp/sharded" | wc -l)" -eq 4 ] && ok "export ${force:-without --force} over a sharded model of someone else's: refused, all kept" \
    || fail "export $force over a sharded model: $out; $(ls -a "$tmp/sharded")"
done
mkdir -p "$tmp/init" && echo '{"mine": true}' > "$tmp/init/tokenizer.json"
out=$("$zaya" init --preset tiny --out "$tmp/init" --tokenizer "$tmp/tokenizer.json" 2>&1)
[ $? -eq 1 ] && grep -q "tokenizer.json that zaya did not write" <<<"$out" && [ "$(cat "$tmp/init/tokenizer.json")" = '{"mine": true}' ] \
  && ok "init refuses to replace a user's tokenizer.json" || fail "init over a user's tokenizer.json: $out"
step_dir=$(ls -d "$tmp"/a/checkpoints/step_* | sort -t_ -k2 -n | tail -1)
out=$("$zaya" export --checkpoint "$step_dir" --out "$step_dir" 2>&1)
[ $? -eq 1 ] && grep -q "would overwrite" <<<"$out" && ok "export refuses to write over its checkpoint" \
  || fail "export over its checkpoint: $out"

# 8. A damaged `latest` is not trusted: the newest intact checkpoint is used, and the reason given.
echo garbage > "$tmp/a/checkpoints/latest"
out=$("$zaya" export --checkpoint "$tmp/a" --out "$tmp/model-2" 2>&1)
[ $? -eq 0 ] && grep -q "$(basename "$step_dir"): .*latest names no checkpoint" <<<"$out" \
  && ok "a damaged latest: the newest checkpoint, and why" || fail "a damaged latest: $out"
# 9. A full disk (a 4 MB tmpfs: two checkpoints fit, the third does not) and a read-only run directory:
# a clear error, the published checkpoints intact and loadable, nothing unfinished left behind.
mkdir -p "$tmp/disk"
if mount -t tmpfs -o size=4m tmpfs "$tmp/disk" 2>/dev/null; then
  trap 'umount "$tmp/disk" 2>/dev/null; kill -9 $(jobs -p) 2>/dev/null; rm -rf "$tmp"' EXIT
  out=$(train --run-dir "$tmp/disk/run" "${short[@]}" --set checkpoint.every_steps=5 2>&1)
  code=$?
  loadable=0
  for dir in "$tmp"/disk/run/checkpoints/step_*; do
    "$zaya" export --checkpoint "$dir" --out "$tmp/disk-export-$(basename "$dir")" > /dev/null 2>&1 && loadable=$((loadable + 1))
  done
  [ $code -eq 1 ] && grep -q "No space left on device" <<<"$out" && [ $loadable -ge 1 ] \
    && [ -z "$(ls -A "$tmp/disk/run/checkpoints" | grep tmp)" ] \
    && ok "a full disk: a clear error, $loadable checkpoints intact, no unfinished write left" \
    || fail "a full disk: exit $code, $loadable loadable: $(tail -1 <<<"$out"); $(ls -A "$tmp/disk/run/checkpoints")"
  out=$("$zaya" prepare --tokenizer "$tmp/tokenizer.json" --input "$tmp/corpus" --output "$tmp/disk/docs" 2>&1)
  [ $? -eq 1 ] && grep -q "No space left on device" <<<"$out" && [ -z "$(ls "$tmp/disk" | grep docs)" ] \
    && ok "prepare on a full disk: a clear error, no output left" || fail "prepare on a full disk: $out"
  umount "$tmp/disk"
  mount -t tmpfs -o size=4m,ro tmpfs "$tmp/disk"
  out=$(train --run-dir "$tmp/disk/run" 2>&1)
  [ $? -eq 2 ] && grep -q "disk/run: cannot create the run directory: Read-only file system" <<<"$out" \
    && ok "a read-only run directory: a one-line error" || fail "a read-only run directory: $out"
  umount "$tmp/disk"
else
  echo "skipped: a full disk and a read-only run directory (cannot mount a tmpfs here: not root?)"
fi

out=$("$zaya" generate --model "$tmp/model" --prompt "The " --max-new-tokens 1000000000000000000 2>&1)
[ $? -eq 1 ] && grep -q "more than the model's context" <<<"$out" && ok "generate past the model's context: an error" \
  || fail "generate past the context: $out"
out=$("$zaya" generate --model "$tmp/model" --prompt "$(yes "The function returns" | head -3000 | tr '\n' ' ')" --max-new-tokens 1 2>&1)
[ $? -eq 1 ] && grep -q "field '--prompt': the prompt is .* tokens; the model's context" <<<"$out" \
  && ok "generate with a prompt past the context: the prompt is blamed" || fail "generate with a long prompt: $out"
out=$("$zaya" generate --model "$tmp/model" --prompt "The " --max-new-tokens 12 --seed 1 2>&1)
[ $? -eq 0 ] && [ ${#out} -gt 4 ] && ok "generate: $(tr '\n' ' ' <<<"$out")" || fail "generate: $out"
out=$("$zaya" generate --model "$tmp/model" --prompt "The " --max-new-tokens 12 --seed 1 --precision bf16 2>&1)
[ $? -eq 0 ] && [ ${#out} -gt 4 ] && ok "generate in bf16: $(tr '\n' ' ' <<<"$out")" || fail "generate in bf16: $out"

report
