#!/usr/bin/env bash
# Interleaved ping-pong: the bare cache-line floor, volley (busy-poll) and NetPIPE over Open MPI
# (btl self,vader), each pinned to CPUs 0 and 1, in rotation A B C A B C ... so that drift of the
# virtual CPUs hits all of them alike. Prints one line per run and the medians.
#
#   bench/interleave-pingpong.sh [REPS]
#
# Needs: openmpi-bin and netpipe-openmpi (installed if missing, as root), gcc.
# This is a stop-gap until `volley bench` (issue 4) measures these side by side itself.
set -euo pipefail
cd "$(dirname "$0")/.."
reps=${1:-5}
if ! command -v NPopenmpi >/dev/null; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openmpi-bin netpipe-openmpi
fi
cargo build --release -q --workspace --examples
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
gcc -O2 -o "$tmp/bare" bench/bare_pingpong.c

pick() { # file size column -> value
    awk -v s="$2" -v c="$3" '$1 == s { print $c; exit }' "$1"
}
for r in $(seq 1 "$reps"); do
    bare=$("$tmp/bare" 2000000 | awk '{print $(NF-1)}')
    VOLLEY_WAIT=busy target/release/volley run -n 2 --cpus 0,1 target/release/examples/pingpong > "$tmp/v"
    v8=$(pick "$tmp/v" 8 3); v64k=$(pick "$tmp/v" 65536 6); v8m=$(pick "$tmp/v" 8388608 6)
    (cd "$tmp" && mpirun.openmpi --allow-run-as-root -np 2 --cpu-set 0,1 --bind-to core \
        --mca btl self,vader NPopenmpi -u 8388608 -o "$tmp/np.out" > /dev/null 2>&1)
    # NetPIPE: bytes, Mbps, one-way seconds.
    o8=$(awk '$1 == 8 { printf "%.3f", $3 * 1e6; exit }' "$tmp/np.out")
    o64k=$(awk '$1 == 65536 { printf "%.1f", $2 / 8; exit }' "$tmp/np.out")
    o8m=$(awk '$1 == 8388608 { printf "%.1f", $2 / 8; exit }' "$tmp/np.out")
    printf 'run %d  bare_ns %s  volley_8B_us %s ompi_8B_us %s  volley_64K_MBs %s ompi_64K_MBs %s  volley_8M_MBs %s ompi_8M_MBs %s\n' \
        "$r" "$bare" "$v8" "$o8" "$v64k" "$o64k" "$v8m" "$o8m"
done | tee "$tmp/runs"
echo "medians:"
for col in 4 6 8 10 12 14 16; do
    name=$(awk -v c=$((col-1)) 'NR==1 {print $c}' "$tmp/runs")
    med=$(awk -v c=$col '{print $c}' "$tmp/runs" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
    printf '  %-16s %s\n' "$name" "$med"
done
