#!/bin/bash
# The transport table after the sealing and buffer-pool changes: 2-core VM, two namespaces joined
# by a veth (loss: through a bridge with 1% of frames dropped in its forward hook). Every volley
# run interleaves kernel TCP (and for ping-pong kernel UDP) in the same invocation, 3 repetitions.
# Usage: docs/perf/net-2026-11-26/run.sh OUTDIR   (as root, from the repository root)
set -u
out=${1:?usage: run.sh OUTDIR}; mkdir -p "$out"
T=target/release
run() { timeout 900 $T/volley run --counters -n 2 --hosts vbn0,vbn1 --launch 'ip netns exec {host}' --cpus 0,1 "$@"; }
ns() {
  ip netns del vbn0 2>/dev/null; ip netns del vbn1 2>/dev/null
  ip netns add vbn0; ip netns add vbn1
  ip link add vbe0 netns vbn0 type veth peer name vbe1 netns vbn1
  ip -n vbn0 addr add 198.18.7.1/24 dev vbe0; ip -n vbn1 addr add 198.18.7.2/24 dev vbe1
  for i in 0 1; do ip -n vbn$i link set vbe$i mtu "$1" up; ip -n vbn$i link set lo up; done
}
trap 'ip netns del vbn0 2>/dev/null; ip netns del vbn1 2>/dev/null; ip link del vbbr 2>/dev/null; nft delete table bridge vbloss 2>/dev/null' EXIT
for mtu in 1500 9000; do
  ns $mtu
  for t in udp udp-plain eth xdp; do
    tr=${t%-plain}; off=1; [ $t = udp-plain ] && off=0
    (export VOLLEY_TRANSPORT=$tr VOLLEY_WAIT=busy VOLLEY_UDP_GSO=$off VOLLEY_UDP_GRO=$off
     run $T/volley bench pingpong --vs tcp --sizes 8,1024,65536,8388608 --reps 3 > $out/pp-$t-$mtu.txt 2>&1
     run $T/volley bench stream --vs tcp --sizes 1024,16384,65536,1048576,8388608 --reps 3 > $out/st-$t-$mtu.txt 2>&1)
  done
  ip netns exec vbn1 taskset -c 1 sockperf server -i 198.18.7.2 -p 11111 --nonblocked > /dev/null 2>&1 &
  sleep 0.5
  ip netns exec vbn0 taskset -c 0 sockperf ping-pong -i 198.18.7.2 -p 11111 -m 14 -t 5 --nonblocked > $out/sockperf-$mtu.txt 2>&1
  kill %1; wait
done
ip netns del vbn0; ip netns del vbn1
mtu=1500
ip netns add vbn0; ip netns add vbn1; ip link add vbbr type bridge; ip link set vbbr mtu $mtu up
for i in 0 1; do
  ip link add vbo$i type veth peer name vbe$i netns vbn$i
  ip link set vbo$i mtu $mtu master vbbr up
  ip -n vbn$i addr add 198.18.7.$((i+1))/24 dev vbe$i; ip -n vbn$i link set vbe$i mtu $mtu up; ip -n vbn$i link set lo up
done
for loss in 0 1; do
  nft delete table bridge vbloss 2>/dev/null
  [ $loss = 1 ] && printf 'table bridge vbloss {\n chain drops {\n  type filter hook forward priority 0;\n  iifname "vbo*" numgen random mod 100 < 1 drop\n }\n}\n' | nft -f -
  for t in udp eth xdp; do
    (export VOLLEY_TRANSPORT=$t VOLLEY_WAIT=busy; run $T/volley bench stream --vs tcp --sizes 8388608 --reps 3 > $out/loss$loss-$t-$mtu.txt 2>&1)
  done
done
echo done > $out/DONE
