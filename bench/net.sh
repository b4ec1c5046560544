#!/usr/bin/env bash
# volley across two network namespaces joined by a veth pair (198.18.0.0/15 only), beside the
# kernel: `volley bench` (volley over udp and eth, kernel TCP and UDP in the same run), NetPIPE's
# NPtcp, sockperf's busy-polled UDP ping-pong, and stream throughput under 1% kernel loss.
# Usage: bench/net.sh OUTDIR [MTU...]   (as root; removes the namespaces it makes)
set -euo pipefail
out=${1:?usage: bench/net.sh OUTDIR [MTU...]}; shift
mtus=("${@:-1500 9000}")
mtus=(${mtus[@]})
mkdir -p "$out"
cd "$(dirname "$0")/.."
T=target/release
command -v NPtcp >/dev/null && command -v sockperf >/dev/null && command -v nft >/dev/null || {
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq netpipe-tcp sockperf nftables; }
cleanup() { ip netns del vbn0 2>/dev/null || true; ip netns del vbn1 2>/dev/null || true; }
trap cleanup EXIT
pkill -f 'volley (run|agent|bench)' 2>/dev/null || true
run() { timeout 900 $T/volley run -n 2 --hosts vbn0,vbn1 --launch 'ip netns exec {host}' --cpus 0,1 "$@"; }
for mtu in "${mtus[@]}"; do
    cleanup
    ip netns add vbn0; ip netns add vbn1
    ip link add vbe0 netns vbn0 type veth peer name vbe1 netns vbn1
    ip -n vbn0 addr add 198.18.7.1/24 dev vbe0; ip -n vbn1 addr add 198.18.7.2/24 dev vbe1
    for i in 0 1; do ip -n vbn$i link set vbe$i mtu "$mtu" up; ip -n vbn$i link set lo up; done
    for t in udp eth; do
        VOLLEY_WAIT=busy VOLLEY_TRANSPORT=$t run $T/volley bench pingpong --vs tcp,udp \
            --sizes 8,1024,65536,1048576,8388608 --reps 3 --json "$out/pingpong-$t-$mtu.json" \
            > "$out/pingpong-$t-$mtu.txt"
        VOLLEY_WAIT=busy VOLLEY_TRANSPORT=$t run $T/volley bench stream --vs tcp \
            --sizes 1024,65536,8388608 --reps 3 --json "$out/stream-$t-$mtu.json" \
            > "$out/stream-$t-$mtu.txt"
    done
    # NetPIPE over kernel TCP (blocking), receiver first.
    ip netns exec vbn1 taskset -c 1 NPtcp -o /dev/null > /dev/null 2>&1 &
    sleep 0.5
    ip netns exec vbn0 taskset -c 0 NPtcp -h 198.18.7.2 -u 8388608 -o "$out/np-$mtu.out" > /dev/null 2>&1 || true
    wait || true
    # sockperf: busy-polled kernel UDP ping-pong.
    ip netns exec vbn1 taskset -c 1 sockperf server -i 198.18.7.2 -p 11111 --nonblocked > /dev/null 2>&1 &
    sleep 0.5
    ip netns exec vbn0 taskset -c 0 sockperf ping-pong -i 198.18.7.2 -p 11111 -m 14 -t 5 --nonblocked > "$out/sockperf-$mtu.txt" 2>&1 || true
    kill %1 2>/dev/null || true; wait || true
    # Stream throughput under 1% loss in the kernel, both directions' ingress.
    for i in 0 1; do
        printf 'table netdev vl {\n chain rx {\n  type filter hook ingress device "vbe%s" priority 0;\n  numgen random mod 100 < 1 drop\n }\n}\n' $i | ip netns exec vbn$i nft -f -
    done
    for t in udp eth; do
        VOLLEY_WAIT=busy VOLLEY_TRANSPORT=$t run $T/volley bench stream --vs tcp \
            --sizes 65536,8388608 --reps 3 --json "$out/stream-loss1-$t-$mtu.json" \
            > "$out/stream-loss1-$t-$mtu.txt"
    done
done
echo "results in $out"
