#!/usr/bin/env bash
# The transfer and waiting modes of shared memory in one sitting, pinned to two CPUs, in rounds:
# volley ping-pong with single copy off (inline and pipelined copy) and on from 4 KiB, NetPIPE
# over Open MPI (vader) and MPICH, single-thread memcpy, the bare eventfd wake-up floor, volley
# in blocking ping-pong, and the idle test. Prints a summary (medians over the rounds).
#
#   bench/modes.sh [OUTDIR] [ROUNDS]       (defaults: bench-out/modes, 3)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-bench-out/modes}
rounds=${2:-3}
cpus=0,1
sizes=8,256,4K,64K,1M,8M,64M
mkdir -p "$out"
need=()
command -v NPopenmpi >/dev/null || need+=(openmpi-bin netpipe-openmpi)
command -v NPmpich2 >/dev/null || need+=(mpich netpipe-mpich2)
if [ ${#need[@]} -gt 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}"
fi
cargo build --release -q -p volley-cli
v=target/release/volley
gcc -O2 -o "$out/bare_eventfd" bench/bare_eventfd.c
gcc -O2 -o "$out/memcpy_bw" bench/memcpy_bw.c
for r in $(seq 1 "$rounds"); do
    echo "== round $r of $rounds" >&2
    VOLLEY_WAIT=busy VOLLEY_SINGLE_COPY=off "$v" bench pingpong --cpus $cpus --sizes $sizes --reps 1 \
        --json "$out/ring.$r.json" > /dev/null
    VOLLEY_WAIT=busy VOLLEY_SINGLE_COPY_THRESHOLD=4096 "$v" bench pingpong --cpus $cpus --sizes $sizes --reps 1 \
        --json "$out/single.$r.json" > /dev/null
    (cd "$out" && mpirun.openmpi --allow-run-as-root -np 2 --cpu-set $cpus --bind-to core \
        --mca btl self,vader NPopenmpi -u 67108864 -o "np-openmpi.$r.out" > /dev/null 2>&1)
    (cd "$out" && mpirun.mpich -np 2 -bind-to user:$cpus NPmpich2 -u 67108864 -o "np-mpich.$r.out" > /dev/null 2>&1)
    "$out/memcpy_bw" > "$out/memcpy.$r.txt"
    "$out/bare_eventfd" 2000 > "$out/eventfd.$r.txt"
    VOLLEY_WAIT=block "$v" bench pingpong --cpus $cpus --sizes 8 --reps 1 --iters 2000 --json "$out/block.$r.json" > /dev/null
    "$v" bench idle --cpus $cpus --reps 1 --iters 300 --idle-ms 300 --json "$out/idle.$r.json" > /dev/null
done
python3 - "$out" "$rounds" <<'PY'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
med = statistics.median
def vb(name, r):
    d = json.load(open(f"{out}/{name}.{r}.json"))
    return {p["bytes"]: (p["time_us"]["median"], p["mbytes_per_s"]) for p in d["series"][0]["points"]}
def np(name, r):
    pts = {}
    for line in open(f"{out}/np-{name}.{r}.out"):
        f = line.split()
        if len(f) >= 3:
            pts[int(f[0])] = (float(f[2]) * 1e6, int(f[0]) / (float(f[2]) * 1e6) if float(f[2]) > 0 else 0)
    return pts
systems = [("volley ring (inline / pipelined)", lambda r: vb("ring", r)),
           ("volley single copy from 4 KiB", lambda r: vb("single", r)),
           ("NetPIPE Open MPI (vader)", lambda r: np("openmpi", r)),
           ("NetPIPE MPICH", lambda r: np("mpich", r))]
lat = [8, 256, 4096, 65536]
bw = [65536, 1 << 20, 8 << 20, 64 << 20]
print(f"Medians over {rounds} rounds, CPUs 0,1, busy-poll.\n")
print("| system | " + " | ".join(f"{s} B µs" for s in lat) + " | " + " | ".join(f"{s >> 10} KiB MB/s" for s in bw) + " |")
print("|---" * (1 + len(lat) + len(bw)) + "|")
for name, get in systems:
    runs = [get(r) for r in range(1, rounds + 1)]
    cells = [f"{med([x[s][0] for x in runs]):.3f}" for s in lat] + [f"{med([x[s][1] for x in runs]):.0f}" for s in bw]
    print(f"| {name} | " + " | ".join(cells) + " |")
mem = {}
for r in range(1, rounds + 1):
    for line in open(f"{out}/memcpy.{r}.txt"):
        f = line.split()
        mem.setdefault(int(f[1]), []).append((float(f[4]), float(f[7])))
print("| memcpy, one thread (hot / cold) | | | | | " + " | ".join(f"{med([h for h, _ in mem[s]]):.0f} / {med([c for _, c in mem[s]]):.0f}" for s in bw) + " |")
ev = [float(open(f"{out}/eventfd.{r}.txt").read().split()[-2]) for r in range(1, rounds + 1)]
blk = [vb("block", r)[8][0] for r in range(1, rounds + 1)]
print(f"\nWake-up, back-to-back ping-pong: bare eventfd {med(ev):.1f} µs (rounds {', '.join(f'{x:.1f}' for x in ev)}); volley block mode 8 B one-way {med(blk):.1f} µs (rounds {', '.join(f'{x:.1f}' for x in blk)})")
print("\nIdle rank waiting 300 ms, then woken (median over rounds):")
print("| mode | CPU used | wake-up µs |\n|---|---|---|")
idle = {}
for r in range(1, rounds + 1):
    for s in json.load(open(f"{out}/idle.{r}.json"))["series"]:
        p = s["points"][0]
        idle.setdefault(s["transport"], []).append((p["extra"]["cpu_fraction"], p["time_us"]["median"]))
for t, v in idle.items():
    print(f"| {t} | {100 * med([c for c, _ in v]):.2f}% | {med([w for _, w in v]):.1f} |")
PY
