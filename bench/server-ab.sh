#!/usr/bin/env bash
# Two builds of volley (A and B, each a folder made by bench/server-pack.sh) beside Open MPI in
# one sitting, round by round (A B [variants of B] Open MPI, A B ... so drift hits all alike):
# the shared-memory figures a change to the send and receive paths moves.
#
#   bench/server-ab.sh A B OUTDIR ROUNDS [BIG]
#
# Each round: mpi_p2p (bench/mpi_p2p.c built by each MPI's mpicc) message rate with a window of
# 64, 8 B and 64 KiB ping-pong, ring of 8 and 16 ranks; `volley bench rate` (volley's own API);
# each for A, for B, and for B under every setting in VARIANTS (space-separated VAR=VALUE
# lists, comma-joined for several: e.g. VARIANTS="VOLLEY_EXCLUSIVE_BIAS=off"). BIG=1 adds, once,
# the MPI ring of 64 and 256 ranks (oversubscribed) for B and Open MPI.
set -uo pipefail
A=$(realpath "${1:?usage: bench/server-ab.sh A B OUTDIR ROUNDS [BIG]}")
B=$(realpath "${2:?}")
out=${3:?}
rounds=${4:?}
big=${5:-0}
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
"$A/volley" mpicc -O2 -o "$out/p2p_A" "$here/mpi_p2p.c" || exit 1
"$B/volley" mpicc -O2 -o "$out/p2p_B" "$here/mpi_p2p.c" || exit 1
[ -n "$ompicc" ] && "$ompicc" -O2 -o "$out/p2p_ompi" "$here/mpi_p2p.c"
# Each volley system: a label, a build folder and the environment it runs with.
systems=("A|$A|" "B|$B|")
for v in ${VARIANTS:-}; do systems+=("B:$v|$B|$v"); done
for r in $(seq 1 "$rounds"); do
    log "round $r"
    for s in "${systems[@]}"; do
        IFS='|' read -r label dir envs <<< "$s"
        prog=$out/p2p_${label%%:*}
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
        run ompi 60 "${o[@]}" -np 2 --cpu-set 0,1 "$out/p2p_ompi" rate 64
        run ompi 60 "${o[@]}" -np 2 --cpu-set 0,1 "$out/p2p_ompi" pingpong 8 64K
        for n in 8 16; do run ompi 60 "${o[@]}" -np $n "$out/p2p_ompi" ring 2000; done
    fi
done
if [ "$big" = 1 ]; then
    for n in 64 256; do
        log "ring of $n"
        run B 120 "$B/volley" run -n $n "$out/p2p_B" ring 50
        [ -n "$ompicc" ] && run ompi 120 "$ompirun" --oversubscribe --bind-to none -np $n "$out/p2p_ompi" ring 50
    done
fi
log done
