#!/usr/bin/env bash
# The knowledge world taught into a pretrained LM, on one GPU: the teaching schedule chosen on the
# world's check questions (benchmarks/teach_schedule.py, one process a schedule, sharing the card),
# then A1–A4 (benchmarks/testbed.py) on two world seeds with it. Every taught model is cached, so a
# second call after a cut-off one goes on where it stopped. Results land in $OUT (default ./world-gpu).
#
#   bash benchmarks/world_on_gpu.sh SmolLM2-135M-Instruct.Q4_1.gguf            # sweep, then A1–A4
#   STAGE=sweep bash benchmarks/world_on_gpu.sh MODEL                             # the sweep alone
#   STAGE=check SCHEDULE=20x1e-4 bash benchmarks/world_on_gpu.sh MODEL            # A1–A4 on a chosen schedule
#   CHAT=off OUT=world-gpu-plain bash benchmarks/world_on_gpu.sh MODEL  # questions as plain text (default: auto)
set -euo pipefail
MODEL=${1:?usage: world_on_gpu.sh MODEL (a GGUF file, folder or hub name)}
OUT=${OUT:-world-gpu}
SCHEDULES=${SCHEDULES:-5x5e-5 10x1e-4 10x3e-4 20x1e-4 20x3e-4}  # 3,445 steps: ~6 min of one H200 for SmolLM2 (estimated: about 0.3 s a step measured with 3 processes sharing it)
STAGE=${STAGE:-all}
CHAT=${CHAT:-auto}  # --chat-template of every teaching and check: part of the taught model's key
[[ $STAGE == all || $STAGE == sweep || $STAGE == check ]] || { echo "STAGE=$STAGE: use all, sweep or check" >&2; exit 2; }
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$OUT"

wait_all() {  # every background job, failing if any failed (a bare `wait` returns 0 whatever they did)
  local failed=0 pid
  for pid in $(jobs -p); do wait "$pid" || failed=1; done
  return $failed
}

if [[ $MODEL == *.gguf ]]; then  # converted once, before the processes that share it start
  python -c 'import sys; from pathlib import Path; from r2f_bench.engine.gguf_models import gguf_folder
gguf_folder(Path(sys.argv[1]))' "$MODEL"
fi

if [[ $STAGE == all || $STAGE == sweep ]]; then
  for s in $SCHEDULES; do  # one process a schedule; each writes its own cache entry
    python "$HERE/teach_schedule.py" --model "$MODEL" --schedules "$s" --chat-template "$CHAT" --json \
      > "$OUT/schedule-$s.json" 2> "$OUT/schedule-$s.log" &
  done
  wait_all || { echo "a schedule failed: see $OUT/schedule-*.log" >&2; exit 1; }
  # all read back from the cache: one table and the choice over every schedule
  python "$HERE/teach_schedule.py" --model "$MODEL" --schedules "$(echo $SCHEDULES | tr ' ' ',')" \
    --chat-template "$CHAT" | tee "$OUT/schedules.md"
  SCHEDULE=$(sed -n 's/^chosen: --teach-epochs \([0-9]*\) --teach-lr \([^ ]*\) .*/\1x\2/p' "$OUT/schedules.md")
fi

if [[ $STAGE == all || $STAGE == check ]]; then
  : "${SCHEDULE:?no schedule: run the sweep first or set SCHEDULE=EPOCHSxLR}"
  for world in 0 1; do
    python "$HERE/testbed.py" --model "$MODEL" --world-seed "$world" --seeds 0,1 --teach-epochs "${SCHEDULE%x*}" \
      --teach-lr "${SCHEDULE#*x}" --chat-template "$CHAT" --strengths 3e-6:3e-4:5 --eval-batch-size 512 \
      --curves "$OUT/curves" --json \
      > "$OUT/testbed-world$world.json" 2> "$OUT/testbed-world$world.log" &
  done
  wait_all || echo "A1-A4 fail or a run failed: see $OUT/testbed-world*.log" >&2
  cat "$OUT"/testbed-world*.json
fi
