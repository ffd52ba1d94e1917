#!/usr/bin/env bash
# The learning curve's steps on the GPU machine, each one device call (docs/appendix/learning_curve.md, "Device
# session"). Run from the checkout's root after ../shared/gpu's staging (gpu_install.sh: /tmp/site, the tiny model in
# /tmp/stage/model). Long steps run in the background (setsid: they outlive the call on a warm machine); `peek`
# follows them. Everything lands under /tmp; what a later call must bring back goes to $OUT.
#
#   bash bench/curve_device.sh data DIR          carried data (sft/rl/benchmark parquet, world/) -> /tmp/data
#                                                (CURVE_DATA: elsewhere)
#   bash bench/curve_device.sh warm [STEPS]      build the WIDTHxLAYERS policy (default 512x4), plain SFT in the
#                                                background -> $SFT (default /tmp/curve-sft; log $SFT.log), then
#                                                its checks (every turn of 8 RL episodes, 32 answers)
#   bash bench/curve_device.sh check STEP        the check of $SFT/step_STEP in the background (while
#                                                the warm start trains on: start RL as soon as one passes)
#   bash bench/curve_device.sh free POLICY [ARGS...]    bench/curve_free_run.py on the GPU in the background: episodes as
#                                                RL runs them, RL's step metrics, before any RL run
#                                                -> /tmp/free-run.json (ARGS: its flags, e.g. --questions 16)
#   bash bench/curve_device.sh curve POLICY [ARGS...]   bench/learning_curve.py in the background -> /tmp/curve
#                                                (MEI=DIR: a warm MEI; default none, the extractive interface)
#                                                (ARGS: its flags, e.g. --seeds 1 --parallel 2 -- OVERRIDES)
#   bash bench/curve_device.sh peek [SECONDS]    wait, then print the warm start's and the runs' progress; metrics,
#                                                logs and check.json to $OUT
#   bash bench/curve_device.sh back DIR NAME     DIR as NAME.tar.* parts of 15 MiB, the next 4 to $OUT each call
#                                                (a call returns ~64 MiB): repeat until all are sent
#   bash bench/curve_device.sh rollout [ARGS...]  bench/bench_rollout_vllm.py on the qwen3-vl-8b shape (dummy weights)
#                                                in the background -> /tmp/bench-rollout.log (ARGS: its flags)
#   bash bench/curve_device.sh spy PATTERN       py-spy's stacks of the newest process matching PATTERN (a py-spy
#                                                wheel carried in the data directory; to $OUT)
set -uo pipefail
export PYTHONPATH=/tmp/site:$PWD PATH=/tmp/site/bin:$PATH HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
  VLLM_NO_USAGE_STATS=1 VLLM_USE_FLASHINFER_SAMPLER=0 XLA_PYTHON_CLIENT_PREALLOCATE=false JAX_PLATFORMS=cpu
OUT=${OUT:-/tmp/out}
DATA=${CURVE_DATA:-/tmp/data}  # where `data` copies to and the other steps read
SFT=${SFT:-/tmp/curve-sft}     # a warm start's checkpoints (two at once: another SFT and CURVE_DATA)
mkdir -p "$OUT"
background() {  # LOG CMD...: detached from this call, stdin closed
  local log=$1; shift
  setsid nohup "$@" > "$log" 2>&1 < /dev/null &
}

case "${1:-}" in
  data)
    mkdir -p "$DATA" && cp -r "$2"/. "$DATA"/ && du -sh "$DATA"/*
    # a py-spy wheel carried beside the data (`pip download py-spy`): `spy` can then dump a slow trainer's stacks
    for wheel in "$DATA"/py_spy-*.whl; do
      if [ -f "$wheel" ]; then python -m pip install -q --no-index --no-deps --target /tmp/pyspy "$wheel"; fi
    done ;;
  spy)
    # the newest match that is not this script (its own command line holds the pattern too)
    pid=$(pgrep -f "$2" | while read -r p; do grep -qa curve_device.sh "/proc/$p/cmdline" 2>/dev/null || echo "$p"; done \
          | tail -n 1)
    [ -n "$pid" ] || { echo "no process matches $2"; exit 1; }
    /tmp/pyspy/bin/py-spy dump --pid "$pid" | tee "$OUT/spy-$pid.txt" ;;
  warm)
    [ -d /tmp/curve-policy0 ] || python -m verl_ext.models build --out /tmp/curve-policy0 \
      --hidden-size "${WIDTH:-512}" --layers "${LAYERS:-4}" --dtype bfloat16 --tokenizer-from /tmp/stage/model || exit 1
    background "$SFT.log" python bench/curve_sft_plain.py --model /tmp/curve-policy0 --data "$DATA" \
      --out "$SFT" --steps "${2:-400}" --save-every "${SAVE_EVERY:-200}" --check 8 \
      --check-temperature 1.0 0.7 ${SFT_ARGS:-}
    echo "warm start in the background: $SFT.log" ;;
  check)  # an intermediate checkpoint's check while the warm start trains on; waits for it to be saved
    ckpt=$SFT/step_$2/huggingface
    background "/tmp/curve-check-$2.log" bash -c "for i in \$(seq 360); do [ -f $ckpt/processor_config.json ] && break; \
      sleep 5; done; exec python bench/curve_sft_plain.py --check-only --model $ckpt --data $DATA --out /tmp/curve-check-$2 \
      --check 8 --check-temperature 1.0 0.7"
    echo "check of step $2 in the background, once saved: /tmp/curve-check-$2.log" ;;
  free)
    policy=$2; shift 2
    background /tmp/free-run.log python bench/curve_free_run.py --model "$policy" --data "$DATA" --device cuda \
      --out /tmp/free-run.json "$@"
    echo "free-running check in the background: /tmp/free-run.log" ;;
  curve)
    policy=$2; shift 2
    background /tmp/curve.log python bench/learning_curve.py --data "$DATA" --world "$DATA/world" \
      --policy "$policy" --mei "${MEI:-none}" --out /tmp/curve "$@"
    echo "curve runs in the background: /tmp/curve.log" ;;
  rollout)  # beside a warm start (its model is small): the figure is a ratio measured within the one run
    shift
    [ -d /tmp/q3vl8b ] || python -m verl_ext.models shape --like qwen3-vl-8b --out /tmp/q3vl8b \
      --tokenizer-from /tmp/stage/model || exit 1
    background /tmp/bench-rollout.log python bench/bench_rollout_vllm.py --model /tmp/q3vl8b \
      --json /tmp/bench-rollout.json "$@"
    echo "rollout bench in the background: /tmp/bench-rollout.log" ;;
  peek)
    sleep "${2:-0}"
    if [ -f /tmp/bench-rollout.log ]; then
      echo "== bench-rollout"; grep -aE 'Traceback|Error|ratio|round|median' /tmp/bench-rollout.log | tail -n 6 | cut -c1-300
      cp /tmp/bench-rollout.log "$OUT"/; [ -f /tmp/bench-rollout.json ] && cp /tmp/bench-rollout.json "$OUT"/
    fi
    for log in /tmp/curve-sft*.log; do  # every warm start's
      [ -f "$log" ] || continue
      name=$(basename "$log" .log)
      echo "== $name"; grep -E '^\{"step"|check at|saved' "$log" | tail -n 6
      cp "$log" "$OUT"/
      for f in check.json log.jsonl; do [ -f "/tmp/$name/$f" ] && cp "/tmp/$name/$f" "$OUT/$name-$f"; done
    done
    if [ -f /tmp/free-run.log ]; then
      echo "== free-run"; grep -aE 'Traceback|Error|^[a-z_/]+: [0-9.]+$|answers right' /tmp/free-run.log | tail -n 20
      for f in /tmp/free-run.log /tmp/free-run.json; do [ -f "$f" ] && cp "$f" "$OUT"/; done
    fi
    for log in /tmp/curve-check-*.log; do
      [ -f "$log" ] && grep -H 'check at' "$log"
    done
    if [ -f /tmp/curve.log ]; then
      tail -n 8 /tmp/curve.log | cut -c1-300
      for run in /tmp/curve/*/seed*; do
        [ -d "$run" ] || continue
        name=$(echo "${run#/tmp/curve/}" | tr / -)
        for f in "$run"/metrics-*.jsonl "$run"/done.json; do [ -f "$f" ] && cp "$f" "$OUT/$name-$(basename "$f")"; done
        # the trainer's log, where its start-up's phases show (engine up took 211-362 s): its last 2 MB
        for f in "$run"/main_ppo-*.log; do [ -f "$f" ] && tail -c 2000000 "$f" > "$OUT/$name-$(basename "$f")"; done
        grep -aE 'Traceback|Error:' "$run"/main_ppo-*.log 2>/dev/null | tail -n 2 | cut -c1-300
      done
    fi
    if command -v nvidia-smi > /dev/null; then nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader; fi
    free -g | awk 'NR == 2 {print "host memory: " $3 " of " $2 " GiB used"}' ;;  # several runs share the host
  back)  # split once into $BACK; each call sends the next 4 parts (a call returns ~64 MiB)
    back=${BACK:-/tmp/back}
    mkdir -p "$back"
    ls "$back/$3".tar.* > /dev/null 2>&1 || \
      tar cf - -C "$(dirname "$2")" "$(basename "$2")" | split -b "${PART_SIZE:-15M}" - "$back/$3.tar."
    sent=0
    for part in "$back/$3".tar.*; do
      [ "$sent" -lt 4 ] || break
      grep -qx "$part" "$back/$3.sent" 2>/dev/null && continue
      cp "$part" "$OUT"/ && echo "$part" >> "$back/$3.sent" && sent=$((sent + 1))
    done
    echo "$(wc -l < "$back/$3.sent") of $(ls "$back/$3".tar.* | wc -l) parts sent; here: cat NAME.tar.* | tar xf -" ;;
  *)
    sed -n '2,/^set -uo/p' "$0" | sed '$d'; exit 2 ;;
esac
