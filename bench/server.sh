#!/usr/bin/env bash
# The server figures of issues 10, 11, 14 and 15 in one sitting, volley beside Open MPI and the
# kernel, for a machine that has Open MPI and gcc but neither cargo nor internet: it runs
# release binaries built elsewhere (BIN holds volley, libmpi.so, include/, pkgconfig/ and
# examples/ring, as target/release does; bench/server-pack.sh makes such a folder).
#
#   bench/server.sh BIN OUTDIR ROUNDS PART...
#
# PARTs, each in rounds that interleave the systems (A B C A B C ...) so drift hits all alike:
#   probe  the machine: CPUs, caches, NUMA, kernel, Open MPI, what namespaces and veth allow
#   p2p    two ranks on CPUs 0,1: volley's ping-pong (default waiting, busy, single copy from
#          64 KiB, cold 8 MiB), the same C program over volley's MPI and Open MPI (ping-pong,
#          also sending the buffer just received into as NetPIPE does, message rate with a
#          window of 64, ring of 8 and 16), volley's rate and ring, the
#          bare eventfd wake-up floor beside volley's blocked wake-up and idle cost
#   tune   `volley tune`, then ping-pong with the profile in force beside Open MPI again
#   big    64 and 256 ranks: ring per hop and the segment `volley info -n` announces
#   coll   the collectives at 8 and 16 ranks, one core each, beside Open MPI
#   net    two namespaces joined by a veth (198.18.7.0/24), MTU 1500 and 9000: volley over
#          udp and eth beside kernel TCP (needs `ip` on PATH; removes what it makes)
#
# ONLY="shell commands" runs those after the build instead of the parts (a quick re-run).
# Every step has a time limit and a failed step is logged, not fatal: one sitting on a borrowed
# machine should come back with everything that worked.
set -uo pipefail
bin=$(realpath "${1:?usage: bench/server.sh BIN OUTDIR ROUNDS PART...}")
out=${2:?}
rounds=${3:?}
shift 3
mkdir -p "$out"
out=$(realpath "$out")
V=$bin/volley
here=$(cd "$(dirname "$0")" && pwd)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader
log() { echo "== $(date +%T) $*" | tee -a "$out/log.txt" >&2; }
# step NAME SECONDS CMD...: runs CMD with its output in $out/NAME.txt, a limit and a log line.
step() {
    local name=$1 limit=$2
    shift 2
    local t0=$SECONDS
    timeout -k 5 "$limit" "$@" > "$out/$name.txt" 2>&1
    local rc=$?
    log "$name rc=$rc $((SECONDS - t0))s"
    return 0
}
# Open MPI under the names `volley bench` looks for (Debian's and Ubuntu's packages have them;
# a plain install has only mpicc/mpirun).
shim=$out/.shim
mkdir -p "$shim"
for t in mpicc mpirun; do
    if ! command -v $t.openmpi > /dev/null && command -v $t > /dev/null; then
        ln -sf "$(command -v $t)" "$shim/$t.openmpi"
    fi
done
export PATH=$shim:$PATH
ompi=(mpirun.openmpi --bind-to core)

build() {
    gcc -O2 -o "$out/bare_eventfd" "$here/bare_eventfd.c"
    "$V" mpicc -O2 -o "$out/p2p_volley" "$here/mpi_p2p.c"
    mpicc.openmpi -O2 -o "$out/p2p_openmpi" "$here/mpi_p2p.c" || log "no Open MPI mpicc"
}

probe() {
    {
        uname -a; cat /etc/os-release | head -3; nproc; lscpu
        echo "numa nodes: $(ls -d /sys/devices/system/node/node* 2>/dev/null | wc -l)"
        for c in /sys/devices/system/cpu/cpu0/cache/index*; do
            echo "cache $(cat $c/level) $(cat $c/type) $(cat $c/size) shared $(cat $c/shared_cpu_list)"
        done
        grep -E 'MemTotal|Hugepages' /proc/meminfo; df -h /dev/shm
        echo "ptrace_scope $(cat /proc/sys/kernel/yama/ptrace_scope 2>/dev/null)"
        mpirun.openmpi --version; command -v mpicc.openmpi gcc ip nft
        "$V" --version; "$V" info
    } > "$out/probe.txt" 2>&1
    if command -v ip > /dev/null; then
        {
            ip netns add vbprobe && ip -n vbprobe link add a type veth peer name b \
                && echo "veth: works" && ip -n vbprobe link show
            ip netns del vbprobe
        } > "$out/probe-net.txt" 2>&1
    fi
    log "probe done"
}

p2p() {
    for r in $(seq 1 "$rounds"); do
        log "p2p round $r"
        step "vb-pp-default.$r" 120 "$V" bench pingpong --cpus 0,1 --sizes 8,64K,1M,8M --reps 1 --vs tcp,uds
        VOLLEY_WAIT=busy step "vb-pp-busy.$r" 120 "$V" bench pingpong --cpus 0,1 --sizes 8,64K,1M,8M --reps 1
        VOLLEY_SINGLE_COPY_THRESHOLD=65536 step "vb-pp-single.$r" 120 "$V" bench pingpong --cpus 0,1 --sizes 64K,1M,8M --reps 1
        step "vb-pp-cold.$r" 120 "$V" bench pingpong --cpus 0,1 --sizes 1M,8M --reps 1 --cold
        VOLLEY_SINGLE_COPY_THRESHOLD=65536 step "vb-pp-cold-single.$r" 120 "$V" bench pingpong --cpus 0,1 --sizes 1M,8M --reps 1 --cold
        step "mpi-pp-volley.$r" 120 "$V" run -n 2 --cpus 0,1 "$out/p2p_volley" pingpong 8 64K 1M 8M
        step "mpi-pp-openmpi.$r" 120 "${ompi[@]}" -np 2 --cpu-set 0,1 "$out/p2p_openmpi" pingpong 8 64K 1M 8M
        # NetPIPE's pattern: each rank sends the buffer its last receive wrote.
        step "mpi-pp1-volley.$r" 120 "$V" run -n 2 --cpus 0,1 "$out/p2p_volley" pingpong1 64K 1M 8M
        step "mpi-pp1-openmpi.$r" 120 "${ompi[@]}" -np 2 --cpu-set 0,1 "$out/p2p_openmpi" pingpong1 64K 1M 8M
        step "vb-rate.$r" 60 "$V" bench rate --cpus 0,1 --sizes 8 --window 64 --reps 1
        step "mpi-rate-volley.$r" 60 "$V" run -n 2 --cpus 0,1 "$out/p2p_volley" rate 64
        step "mpi-rate-openmpi.$r" 60 "${ompi[@]}" -np 2 --cpu-set 0,1 "$out/p2p_openmpi" rate 64
        for n in 8 16; do
            step "ring-default-$n.$r" 60 "$V" run -n $n "$bin/examples/ring" 20000
            VOLLEY_WAIT=busy step "ring-busy-$n.$r" 60 "$V" run -n $n "$bin/examples/ring" 20000
            step "mpi-ring-volley-$n.$r" 60 "$V" run -n $n "$out/p2p_volley" ring 2000
            step "mpi-ring-openmpi-$n.$r" 60 "${ompi[@]}" -np $n "$out/p2p_openmpi" ring 2000
        done
        step "eventfd.$r" 60 "$out/bare_eventfd" 5000
        VOLLEY_WAIT=block step "vb-block.$r" 60 "$V" bench pingpong --cpus 0,1 --sizes 8 --iters 5000 --reps 1
        step "vb-idle.$r" 60 "$V" bench idle --cpus 0,1 --reps 1 --iters 1000 --idle-ms 100
    done
}

tune() {
    step tune 180 "$V" tune --cpus 0,1
    step info-tuned 30 "$V" info -n 16
    for r in $(seq 1 "$rounds"); do
        step "vb-pp-tuned.$r" 120 "$V" bench pingpong --cpus 0,1 --sizes 8,64K,1M,8M --reps 1
        step "mpi-pp-volley-tuned.$r" 120 "$V" run -n 2 --cpus 0,1 "$out/p2p_volley" pingpong 8 64K 1M 8M
        step "mpi-pp-openmpi-t.$r" 120 "${ompi[@]}" -np 2 --cpu-set 0,1 "$out/p2p_openmpi" pingpong 8 64K 1M 8M
        step "mpi-pp1-volley-tuned.$r" 120 "$V" run -n 2 --cpus 0,1 "$out/p2p_volley" pingpong1 64K 1M 8M
        step "mpi-pp1-openmpi-t.$r" 120 "${ompi[@]}" -np 2 --cpu-set 0,1 "$out/p2p_openmpi" pingpong1 64K 1M 8M
    done
}

big() {
    for n in 2 8 16 64 256; do
        step "info-$n" 30 "$V" info -n $n
    done
    for n in 64 256; do
        step "ring-default-$n" 120 "$V" run -n $n "$bin/examples/ring" 200
        step "mpi-ring-volley-$n" 120 "$V" run -n $n "$out/p2p_volley" ring 50
        step "mpi-ring-openmpi-$n" 120 mpirun.openmpi --oversubscribe --bind-to none -np $n "$out/p2p_openmpi" ring 50
    done
}

coll() {
    local cpus8=0,1,2,3,4,5,6,7 cpus16=0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15
    for n in 8 16; do
        local c=cpus$n
        for op in barrier allreduce bcast reduce allgather alltoall; do
            local sizes=8,1K,64K,1M
            [ $op = barrier ] && sizes=0
            [ $op = alltoall ] || [ $op = allgather ] && sizes=8,1K,64K
            step "coll-$op-$n" 240 "$V" bench $op -n $n --cpus "${!c}" --vs openmpi --sizes $sizes --reps "$rounds"
        done
    done
}

net() {
    command -v ip > /dev/null || { log "net: no ip on PATH"; return; }
    cleanup() { ip netns del vbn0 2> /dev/null; ip netns del vbn1 2> /dev/null; }
    trap cleanup EXIT
    local run=("$V" run -n 2 --hosts vbn0,vbn1 --launch 'ip netns exec {host}' --cpus 0,1)
    for mtu in 1500 9000; do
        cleanup
        ip netns add vbn0 && ip netns add vbn1 \
            && ip link add vbe0 netns vbn0 type veth peer name vbe1 netns vbn1 \
            && ip -n vbn0 addr add 198.18.7.1/24 dev vbe0 && ip -n vbn1 addr add 198.18.7.2/24 dev vbe1 \
            || { log "net: cannot make the namespaces"; cleanup; return; }
        for i in 0 1; do ip -n vbn$i link set vbe$i mtu "$mtu" up; ip -n vbn$i link set lo up; done
        ip netns exec vbn0 "$V" info > "$out/net-info-$mtu.txt" 2>&1
        for t in udp eth; do
            VOLLEY_WAIT=busy VOLLEY_TRANSPORT=$t step "net-pp-$t-$mtu" 180 "${run[@]}" "$V" bench pingpong \
                --vs tcp,udp --sizes 8,1K,64K,1M --reps "$rounds"
            VOLLEY_TRANSPORT=$t step "net-stream-$t-$mtu" 240 "${run[@]}" "$V" bench stream --vs tcp \
                --sizes 1K,64K,1M,8M --reps "$rounds"
        done
    done
    cleanup
}

build; [ -n "${ONLY:-}" ] && { eval "$ONLY"; exit; }
for part in "$@"; do
    log "part $part"
    "$part"
done
log "all done"
