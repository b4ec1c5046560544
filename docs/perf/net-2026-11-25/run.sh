#!/bin/bash
# xdp rows of the transport table, 2-core VM, namespaces joined by a veth (loss: through a bridge).
cd /work/main
T=target/release
out=/tmp/xdpm
run() { timeout 600 $T/volley run --counters -n 2 --hosts vbn0,vbn1 --launch 'ip netns exec {host}' --cpus 0,1 "$@"; }
for mtu in 1500 9000; do
  bash /tmp/ns.sh $mtu
  for t in xdp eth; do
    (export VOLLEY_TRANSPORT=$t VOLLEY_WAIT=busy; run $T/volley bench pingpong --vs tcp,udp --sizes 8,1024,65536,8388608 --reps 3 > $out/pp-$t-$mtu.txt 2>&1)
    (export VOLLEY_TRANSPORT=$t VOLLEY_WAIT=busy; run $T/volley bench stream --vs tcp --sizes 1024,65536,8388608 --reps 3 > $out/st-$t-$mtu.txt 2>&1)
  done
done
ip netns del vbn0; ip netns del vbn1
# 1% loss in a bridge between the two (an XDP program takes frames before a host's ingress hook).
for mtu in 1500; do
  ip netns add vbn0; ip netns add vbn1; ip link add vbbr type bridge; ip link set vbbr mtu $mtu up
  for i in 0 1; do
    ip link add vbo$i type veth peer name vbe$i netns vbn$i
    ip link set vbo$i mtu $mtu master vbbr up
    ip -n vbn$i addr add 198.18.7.$((i+1))/24 dev vbe$i; ip -n vbn$i link set vbe$i mtu $mtu up; ip -n vbn$i link set lo up
  done
  for loss in 0 1; do
    nft delete table bridge vbloss 2>/dev/null
    [ $loss = 1 ] && printf 'table bridge vbloss {\n chain drops {\n  type filter hook forward priority 0;\n  iifname "vbo*" numgen random mod 100 < 1 drop\n }\n}\n' | nft -f -
    for t in xdp eth udp; do
      (export VOLLEY_TRANSPORT=$t VOLLEY_WAIT=busy; run $T/volley bench stream --vs tcp --sizes 8388608 --reps 3 > $out/loss$loss-$t-$mtu.txt 2>&1)
    done
  done
  nft delete table bridge vbloss 2>/dev/null
  ip netns del vbn0; ip netns del vbn1; ip link del vbbr
done
echo done > $out/DONE
