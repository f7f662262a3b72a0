#!/usr/bin/env bash
# One GPU window in one device command (the device tool: at most 10 minutes a command, 8 files of 16 MiB back):
#
#   bash scripts/gpu_window.sh --minutes 9.5          # on the device, carry [".device"], timeout_s 600
#   bash scripts/gpu_window.sh --unpack <folder>      # here: restore what came back into results/
#   bash scripts/gpu_window.sh --prepare mnist        # here: a lean .device (data + env.sh, no wheels), its size
#   bash scripts/gpu_window.sh --size                 # here: do the tree and .device fit the 64 MiB a call carries?
#   OUT=/tmp/w bash scripts/gpu_window.sh --minutes 4 --device cpu --dry-run --env <env.sh>   # every step, tiny
#
# 1. the environment from the carried folder (source .device/env.sh: FLKIT_DATA, PYTHONPATH);
# 2. about a minute of checks of the CNNs still to run at a document's scale: parity on the device
#    (benchmarks/cuda_parity.py), the HiCS-FL Fashion-MNIST CNN's client training and evaluation rates
#    (python -m flkit.window hics-rate), the FedAU Fashion-MNIST CNN's throughput (benchmarks/bench_engine.py,
#    samples/s, synchronized, after a warm-up) and the Table 1 LeNet step (benchmarks/bench_cvar_step.py);
#    written as results/benchmarks/window_*_<gpu>.csv (.log);
# 3. python -m flkit.owed --pay for the minutes left (less --margin for packing): the most valuable items
#    in resumable pieces;
# 4. python -m flkit.window pack: every file of the results root that the window created or changed, as
#    $OUT/results.tar.gz (parts of 15 MiB when larger), $OUT/window-manifest.txt, $OUT/window.log.
# Options: --minutes M (4 to 10), --device cuda|cpu (cpu with --dry-run), --dry-run (tiny budgets; the
# results root is a scratch copy unless FLKIT_RESULTS is set), --env FILE (default .device/env.sh),
# --only ID (pay this item only), --margin MIN (default 0.75), --check-seconds S (default 120; 400 dry).
# Exit status: 0 nothing payable is left, 75 work left, 1 a check, the pay or the packing failed (the rest
# still ran), 2 bad input (one line, before any work).
set -uo pipefail
T0=$(date +%s)
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
PY="${PYTHON:-}"
if [ -z "$PY" ]; then if [ -x "$REPO/.venv/bin/python" ]; then PY="$REPO/.venv/bin/python"; else PY=python3; fi; fi
me="gpu_window.sh"
die() { echo "$me: error: $*" >&2; exit 2; }
absolute() { case "$1" in /*) echo "$1" ;; *) echo "$PWD/$1" ;; esac; }

MINUTES="" DEVICE=cuda DRY=0 ENVF="$REPO/.device/env.sh" ONLY="" MARGIN=0.75 CHECK_S=""
while [ $# -gt 0 ]; do
  case "$1" in
    --unpack) shift; exec "$PY" -m flkit.window unpack "$@" ;;
    --size) cd "$REPO" && exec "$PY" -m flkit.window size ;;
    --prepare) shift; cd "$REPO" && exec "$PY" -m flkit.window prepare "$@" ;;
    --dry-run) DRY=1; shift; continue ;;
    -h|--help) sed -n '2,24p' "$0"; exit 0 ;;
    --minutes|--device|--env|--only|--margin|--check-seconds)
      [ $# -ge 2 ] || die "$1 needs a value" ;;
    *) die "unknown argument ${1@Q} (see --help)" ;;
  esac
  case "$1" in
    --minutes) MINUTES=$2 ;; --device) DEVICE=$2 ;; --env) ENVF=$(absolute "$2") ;; --only) ONLY=$2 ;;
    --margin) MARGIN=$2 ;; --check-seconds) CHECK_S=$2 ;;
  esac
  shift 2
done
[ -n "${OUT-}" ] && OUT=$(absolute "$OUT")
cd "$REPO" || exit 2
[ -n "$MINUTES" ] || die "--minutes M is required (4 to 10: one device command runs at most 10 minutes)"
[[ "$MARGIN" =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "--margin must be a number of minutes >= 0, got ${MARGIN@Q}"
[ -n "$CHECK_S" ] || { [ "$DRY" = 1 ] && CHECK_S=400 || CHECK_S=120; }    # a CPU's checks are slower
[[ "$CHECK_S" =~ ^[0-9]+$ ]] || die "--check-seconds must be a whole number >= 0, got ${CHECK_S@Q}"
if [ -n "$ONLY" ]; then
  "$PY" -c "import sys; from flkit.owed import ITEMS; sys.exit(sys.argv[1] not in {i.id for i in ITEMS})" "$ONLY" \
    2>/dev/null || die "--only ${ONLY@Q}: no such item of python -m flkit.owed"
fi
dry=(); [ "$DRY" = 1 ] && dry=(--dry-run)
"$PY" -m flkit.window check --minutes "$MINUTES" --device "$DEVICE" --env "$ENVF" --out "${OUT-}" "${dry[@]}" \
  || exit 2
mkdir -p "$OUT"

WORK="$(mktemp -d /tmp/gpu_window.XXXXXX)"
trap 'rm -rf "$WORK"' EXIT
LOG="$WORK/window.log" NOTES="$WORK/notes"
: >"$LOG"; : >"$NOTES"
say() { echo "$*" | tee -a "$LOG"; }
note() { echo "$*" >>"$NOTES"; say "== $*"; }
elapsed() { echo $(( $(date +%s) - T0 )); }
FAILED=0

# 1. environment ------------------------------------------------------------------------------------------------
note "GPU window: --minutes $MINUTES --device $DEVICE$([ "$DRY" = 1 ] && echo ' --dry-run')${ONLY:+ --only $ONLY}," \
  "started $(date -u +%FT%TZ)"
# shellcheck disable=SC1090
{ source "$ENVF"; } >"$WORK/env.out" 2>&1; rc=$?
cat "$WORK/env.out" | tee -a "$LOG"
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"     # this checkout's flkit first, whatever env.sh set
if [ "$rc" != 0 ]; then
  if [ "$DRY" = 1 ]; then note "environment: $ENVF returned $rc (a dry run goes on: no GPU tools here)"
  else echo "$me: error: $ENVF failed (exit $rc); see the lines above" >&2; exit 2; fi
fi
TAG="$("$PY" -m flkit.window tag --device "$DEVICE" 2>>"$LOG")" || {
  echo "$me: error: $(tail -n 1 "$LOG")" >&2; exit 2; }
if [ "$DRY" = 1 ] && [ -d "${FLKIT_DATA:-}" ]; then    # nor into the carried data (torchvision unpacks the
  cp -r "$FLKIT_DATA" "$WORK/data" && export FLKIT_DATA="$WORK/data"   # .gz beside them: +55 MB over the cap)
fi
if [ "$DRY" = 1 ] && [ -z "${FLKIT_RESULTS:-}" ]; then     # a dry run never writes into the repository's results/
  mkdir -p "$WORK/results" && tar -C results --exclude=./tmp -cf - . | tar -C "$WORK/results" -xf -
  export FLKIT_RESULTS="$WORK/results"
fi
RES="${FLKIT_RESULTS:-$REPO/results}"
mkdir -p "$RES/benchmarks"
"$PY" -m flkit.window snapshot "$RES" "$WORK/before.json" || { echo "$me: error: cannot read $RES" >&2; exit 2; }
note "device $TAG; results root ${RES#"$REPO"/}; data ${FLKIT_DATA:-<repo>/data}; set-up took $(elapsed) s"

# 2. checks (each bounded; together at most --check-seconds) ---------------------------------------------------
CHECK_END=$(( $(date +%s) + CHECK_S ))
check() {   # check NAME CAP_SECONDS [--tee FILE] CMD...: run CMD with a time limit, log it, note its exit status
  local name=$1 cap=$2 teefile=/dev/null; shift 2
  if [ "$1" = --tee ]; then teefile=$2; shift 2; fi
  local left=$(( CHECK_END - $(date +%s) ))
  if (( left < 10 )); then note "check $name: skipped (the checks' $CHECK_S s are spent)"; return; fi
  [ "$teefile" = /dev/null ] || : >"$teefile"
  local t=$(( cap < left ? cap : left )) s; s=$(date +%s)
  say "-- $name: $*"
  timeout -k 10 "$t" "$@" 2>&1 | tee -a "$LOG" "$teefile"; local rc=${PIPESTATUS[0]}
  local why=""; [ "$rc" = 124 ] || [ "$rc" = 137 ] && why=" (stopped at its limit of $t s)"
  note "check $name: exit $rc after $(( $(date +%s) - s )) s$why"
  [ "$rc" = 0 ] || FAILED=1
}
B="$RES/benchmarks"
if [ "$DRY" = 1 ]; then
  check hics-rate 90 "$PY" -m flkit.window hics-rate --device cpu --rounds 1 --synthetic 1200 --threads 1 \
    --out "$B/window_hics_fmnist_$TAG.csv"
  check fedau-engine 60 "$PY" benchmarks/bench_engine.py --device cpu --models fedau_fmnist --M 2 \
    --paths grouped,sequential,proxy --amp fp32 --steps 1 --min-time 0 --budget 30 --threads 1 --seq-cap 2 \
    --out "$B/window_engine_fedau_fmnist_$TAG.csv"
  check parity 60 "$PY" benchmarks/cuda_parity.py --device cpu --quick --out "$B/window_parity_$TAG.csv"
  note "check cvar-step: skipped (CUDA graphs need a GPU)"
else
  # most valuable first: the rates the ledger lacks, then parity, then the Table 1 step (its price is measured)
  check hics-rate 40 "$PY" -m flkit.window hics-rate --device cuda --rounds 3 --out "$B/window_hics_fmnist_$TAG.csv"
  check fedau-engine 40 "$PY" benchmarks/bench_engine.py --device cuda --models fedau_fmnist --M 100,400 \
    --paths grouped,sequential,proxy --amp fp32 --min-time 0.3 --budget 20 \
    --out "$B/window_engine_fedau_fmnist_$TAG.csv"
  check parity 45 "$PY" benchmarks/cuda_parity.py --device cuda --out "$B/window_parity_$TAG.csv"
  check cvar-step 40 --tee "$B/window_cvar_step_$TAG.log" "$PY" benchmarks/bench_cvar_step.py --models 65 \
    --steps 50 --variants baseline fused
fi

# 3. pay for the rest -------------------------------------------------------------------------------------------
REST=$(awk -v m="$MINUTES" -v e="$(elapsed)" -v g="$MARGIN" 'BEGIN { printf "%.2f", m - e / 60 - g }')
[ "$DRY" = 1 ] && REST=$(awk -v r="$REST" 'BEGIN { printf "%.2f", r < 1 ? 1 : r }')   # a dry run's one short piece
if awk -v r="$REST" 'BEGIN { exit !(r < 1) }'; then
  note "pay: skipped (only $REST min left after the checks)"; PAY=75
else
  pay=(--pay --minutes "$REST" --device "$DEVICE")
  [ -n "$ONLY" ] && pay+=(--only "$ONLY")
  [ "$DRY" = 1 ] && pay+=(--max-pieces 1 --piece-minutes 0.05)
  say "-- pay: python -m flkit.owed ${pay[*]}"
  guard=$(awk -v r="$REST" 'BEGIN { printf "%d", r * 60 + 30 }')
  timeout -k 15 "$guard" "$PY" -m flkit.owed "${pay[@]}" 2>&1 | tee -a "$LOG"; PAY=${PIPESTATUS[0]}
  note "pay: exit $PAY after $(elapsed) s of the window ($REST min were left for it)"
fi
case "$PAY" in 0|75) ;; *) FAILED=1 ;; esac

# 4. pack -------------------------------------------------------------------------------------------------------
note "packing after $(elapsed) s"
"$PY" -m flkit.window pack --root "$RES" --before "$WORK/before.json" --out "$OUT" --log "$LOG" --notes "$NOTES"
packed=$?
[ "$packed" = 0 ] || FAILED=1
if [ "$FAILED" = 1 ]; then code=1; elif [ "$PAY" = 0 ]; then code=0; else code=75; fi
echo "== GPU window done in $(elapsed) s: exit $code; files in $OUT:"; ls -l "$OUT"
exit "$code"
