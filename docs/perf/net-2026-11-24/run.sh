#!/bin/bash
cd /work/main
T=target/release
out=/tmp/netm
run() { timeout 600 $T/volley run --counters -n 2 --hosts vbn0,vbn1 --launch 'ip netns exec {host}' --cpus 0,1 "$@"; }
for mtu in 1500 9000; do
  bash /tmp/ns.sh $mtu
  for t in udp-plain udp eth; do
    case $t in
      udp-plain) env="VOLLEY_TRANSPORT=udp VOLLEY_UDP_GSO=0 VOLLEY_UDP_GRO=0";;
      udp) env="VOLLEY_TRANSPORT=udp";;
      eth) env="VOLLEY_TRANSPORT=eth";;
    esac
    vs=tcp; [ $t = udp ] && vs=tcp,udp
    (export $env VOLLEY_WAIT=busy; run $T/volley bench pingpong --vs $vs --sizes 8,1024,65536,8388608 --reps 3 > $out/pp-$t-$mtu.txt 2>&1)
    (export $env VOLLEY_WAIT=busy; run $T/volley bench stream --vs tcp --sizes 1024,65536,8388608 --reps 3 > $out/st-$t-$mtu.txt 2>&1)
  done
  for i in 0 1; do
    printf 'table netdev vl {\n chain rx {\n  type filter hook ingress device "vbe%s" priority 0;\n  numgen random mod 100 < 1 drop\n }\n}\n' $i | ip netns exec vbn$i nft -f -
  done
  for t in udp eth; do
    (export VOLLEY_TRANSPORT=$t VOLLEY_WAIT=busy; run $T/volley bench stream --vs tcp --sizes 8388608 --reps 3 > $out/loss-$t-$mtu.txt 2>&1)
  done
done
ip netns del vbn0; ip netns del vbn1
echo done > $out/DONE
