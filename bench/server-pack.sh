#!/usr/bin/env bash
# Packs what bench/server.sh needs into one folder (default srv/, ignored by git) for a machine
# without cargo: volley and its MPI face from target/release (debug info stripped, to travel
# light), the ring example, and Debian's `ip` with the libraries it needs beyond libc, behind a
# wrapper that points only `ip` at them.
#
#   cargo build --release --workspace --lib --bins --examples && bench/server-pack.sh [DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-srv}
rm -rf "$dir"
mkdir -p "$dir/examples" "$dir/ip"
r=target/release
for f in volley libmpi.so; do strip --strip-debug -o "$dir/$f" "$r/$f"; done
strip --strip-debug -o "$dir/examples/ring" "$r/examples/ring"
cp -r "$r/include" "$r/pkgconfig" "$dir/"
if command -v ip > /dev/null; then
    ipbin=$(command -v ip)
    cp "$ipbin" "$dir/ip/ip.bin"
    ldd "$ipbin" | awk '$3 ~ /^\// {print $3}' | grep -v '/libc\.so' | xargs -r cp -t "$dir/ip/"
    printf '#!/bin/sh\nd=$(dirname "$(readlink -f "$0")")\nLD_LIBRARY_PATH="$d" exec "$d/ip.bin" "$@"\n' > "$dir/ip/ip"
    chmod +x "$dir/ip/ip"
fi
du -sh "$dir"
