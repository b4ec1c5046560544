#!/usr/bin/env bash
# One sitting, several systems, the same two CPUs: volley bench pingpong (with kernel TCP and
# Unix sockets interleaved inside it), NetPIPE over Open MPI (btl self,vader) and NetPIPE over
# MPICH, and the bare cache-line floor, in rounds A B C D A B C D ... so that drift of the
# virtual CPUs hits all of them alike. Everything lands in OUTDIR as volley result files
# (NetPIPE's np.out converted by `volley import-netpipe`), plus a figure and a summary of
# min/median/max over the rounds.
#
#   bench/compare.sh [OUTDIR] [ROUNDS]       (defaults: bench-out, 3)
#
# Installs the peers if missing (Debian: openmpi-bin netpipe-openmpi mpich netpipe-mpich2), as
# root. Options for volley bench can be added with VOLLEY_BENCH_ARGS.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-bench-out}
rounds=${2:-3}
cpus=${CPUS:-0,1}
max=${MAX:-8388608}
mkdir -p "$out"

need=()
command -v NPopenmpi >/dev/null || need+=(openmpi-bin netpipe-openmpi)
command -v NPmpich2 >/dev/null || need+=(mpich netpipe-mpich2)
if [ ${#need[@]} -gt 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}"
fi
cargo build --release -q -p volley-cli
volley=target/release/volley
gcc -O2 -o "$out/bare_pingpong" bench/bare_pingpong.c

for r in $(seq 1 "$rounds"); do
    echo "== round $r of $rounds" >&2
    "$out/bare_pingpong" 2000000 | tee "$out/bare.$r.txt" >&2
    # shellcheck disable=SC2086
    VOLLEY_WAIT=${VOLLEY_WAIT:-busy} "$volley" bench pingpong --cpus "$cpus" --vs tcp,uds --reps 1 \
        --sizes "0-$max" --label "round $r" --json "$out/volley.$r.json" ${VOLLEY_BENCH_ARGS:-} > "$out/volley.$r.txt"
    (cd "$out" && mpirun.openmpi --allow-run-as-root -np 2 --cpu-set "$cpus" --bind-to core \
        --mca btl self,vader NPopenmpi -u "$max" -o "np-openmpi.$r.out" > /dev/null 2>&1)
    "$volley" import-netpipe "$out/np-openmpi.$r.out" --label "NetPIPE Open MPI (vader)" \
        --transport openmpi-vader -o "$out/openmpi.$r.json"
    (cd "$out" && mpirun.mpich -np 2 -bind-to "user:$cpus" NPmpich2 -u "$max" -o "np-mpich.$r.out" > /dev/null 2>&1)
    "$volley" import-netpipe "$out/np-mpich.$r.out" --label "NetPIPE MPICH" \
        --transport mpich -o "$out/mpich.$r.json"
done

mid=$(( (rounds + 1) / 2 ))
"$volley" plot "$out/volley.$mid.json" "$out/openmpi.$mid.json" "$out/mpich.$mid.json" \
    -o "$out/pingpong.svg" --title "Ping-pong, two processes on CPUs $cpus (round $mid of $rounds)"
"$volley" plot "$out/volley.$mid.json" "$out/openmpi.$mid.json" "$out/mpich.$mid.json" \
    -o "$out/pingpong.png" --title "Ping-pong, two processes on CPUs $cpus (round $mid of $rounds)"

python3 - "$out" "$rounds" <<'PY' | tee "$out/summary.md"
import json, sys, statistics
out, rounds = sys.argv[1], int(sys.argv[2])
rows = {}  # (system, size) -> [(lat_us, MBps)]
for r in range(1, rounds + 1):
    for f in (f"volley.{r}.json", f"openmpi.{r}.json", f"mpich.{r}.json"):
        d = json.load(open(f"{out}/{f}"))
        for s in d["series"]:
            name = s["label"].replace(f"round {r} ", "")
            for p in s["points"]:
                rows.setdefault((name, p["bytes"]), []).append((p["time_us"]["median"], p["mbytes_per_s"]))
bare = [float(open(f"{out}/bare.{r}.txt").read().split()[-2]) for r in range(1, rounds + 1)]
fmt = lambda v: "/".join(f"{x:.3g}" for x in (min(v), statistics.median(v), max(v)))
print(f"Bare cache-line one-way, ns (min/median/max of {rounds}): {fmt(bare)}\n")
print(f"| system | 8 B one-way µs | 64 KiB MB/s | 8 MiB MB/s |")
print("|---|---|---|---|")
for name in sorted({n for n, _ in rows}):
    def cell(size, i):
        v = [x[i] for x in rows.get((name, size), [])]
        return fmt(v) if v else "-"
    print(f"| {name} | {cell(8, 0)} | {cell(65536, 1)} | {cell(8388608, 1)} |")
print(f"\nEach cell: min/median/max over {rounds} rounds; within a round each figure is the median of its samples.")
PY
