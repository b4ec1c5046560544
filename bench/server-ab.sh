#!/usr/bin/env bash
# Builds of volley (each a folder made by bench/server-pack.sh) beside Open MPI in one sitting,
# round by round (A B ... [variants of the last] Open MPI, A B ... so drift hits all alike): the
# shared-memory figures a change to the send and receive paths moves.
#
#   bench/server-ab.sh OUTDIR ROUNDS LABEL=DIR...
#
# Each round: mpi_p2p (bench/mpi_p2p.c built by each MPI's mpicc) message rate with a window of
# 64, 8 B and 64 KiB ping-pong, ring of 8 and 16 ranks; `volley bench rate` (volley's own API);
# each for every build, and for the last build under every setting in VARIANTS
# (space-separated; several variables of one setting joined by commas: e.g.
# VARIANTS="VOLLEY_EXCLUSIVE_BIAS=off VOLLEY_WAIT=busy,VOLLEY_SPIN_US=0").
# BIG="SETTING..." adds, once, the MPI ring of 64 and 256 ranks (oversubscribed on fewer CPUs)
# for the last build under each setting (`-` for none) and Open MPI.
set -uo pipefail
out=${1:?usage: bench/server-ab.sh OUTDIR ROUNDS LABEL=DIR...}
rounds=${2:?}
shift 2
mkdir -p "$out"
out=$(realpath "$out")
here=$(cd "$(dirname "$0")" && pwd)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader
ompirun=$(command -v mpirun.openmpi || command -v mpirun)
ompicc=$(command -v mpicc.openmpi || command -v mpicc)
log() { echo "== $(date +%T) $*" | tee -a "$out/log.txt" >&2; }
# run LABEL SECONDS CMD...: one figure set, appended to results.txt as "LABEL <its lines>".
run() {
    local label=$1 limit=$2
    shift 2
    local o
    o=$(timeout -k 5 "$limit" "$@" 2>&1)
    local rc=$?
    [ $rc -eq 0 ] || log "$label rc=$rc: $(echo "$o" | tail -2 | tr '\n' ' ')"
    echo "$o" | grep -E '^(rate|pingpong|ring) |^ +[0-9]+ +[0-9]' | sed "s|^|$label |" >> "$out/results.txt"
}
bins=$out/.bin
mkdir -p "$bins"
# Each volley system: a label, a build folder, the program built against it, its environment.
systems=()
last=
for b in "$@"; do
    label=${b%%=*}
    dir=$(realpath "${b#*=}")
    "$dir/volley" mpicc -O2 -o "$bins/p2p_$label" "$here/mpi_p2p.c" || exit 1
    systems+=("$label|$dir|$bins/p2p_$label|")
    last="$label|$dir|$bins/p2p_$label"
done
for v in ${VARIANTS:-}; do systems+=("${last%%|*}:$v|${last#*|}|$v"); done
[ -n "$ompicc" ] && "$ompicc" -O2 -o "$bins/p2p_ompi" "$here/mpi_p2p.c"
for r in $(seq 1 "$rounds"); do
    log "round $r"
    for s in "${systems[@]}"; do
        IFS='|' read -r label dir prog envs <<< "$s"
        e=()
        [ -n "$envs" ] && IFS=',' read -ra e <<< "$envs"
        v=(env "${e[@]}" "$dir/volley" run)
        run "$label" 60 "${v[@]}" -n 2 --cpus 0,1 "$prog" rate 64
        run "$label" 60 "${v[@]}" -n 2 --cpus 0,1 "$prog" pingpong 8 64K
        for n in 8 16; do run "$label" 60 "${v[@]}" -n $n "$prog" ring 2000; done
        run "$label core" 60 env "${e[@]}" "$dir/volley" bench rate --cpus 0,1 --sizes 8 --window 64 --reps 3 --iters 20000
    done
    if [ -n "$ompicc" ]; then
        o=("$ompirun" --bind-to core --oversubscribe)
        run ompi 60 "${o[@]}" -np 2 --cpu-set 0,1 "$bins/p2p_ompi" rate 64
        run ompi 60 "${o[@]}" -np 2 --cpu-set 0,1 "$bins/p2p_ompi" pingpong 8 64K
        for n in 8 16; do run ompi 60 "${o[@]}" -np $n "$bins/p2p_ompi" ring 2000; done
    fi
done
IFS='|' read -r label dir prog <<< "$last"
for n in 64 256; do
    for setting in ${BIG:-}; do
        log "ring of $n, $setting"
        e=()
        [ "$setting" != - ] && IFS=',' read -ra e <<< "$setting"
        run "$label:$setting" 120 env "${e[@]}" "$dir/volley" run -n $n "$prog" ring 50
    done
    if [ -n "${BIG:-}" ] && [ -n "$ompicc" ]; then
        run ompi 120 "$ompirun" --oversubscribe --bind-to none -np $n "$bins/p2p_ompi" ring 50
    fi
done
rm -rf "$bins"
log done
