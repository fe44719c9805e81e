#!/bin/sh
# median of 7 launches per configuration (2-CPU machine, noisy: medians)
cd /work/spike-wasm
med() { sort -n | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}'; }
for b in host host_cnt host_instr host_instr_lto; do
  for m in sig mm; do
    v=$(w2c/$b $m 7 2>/dev/null | grep -o "run [0-9.]* ms" | awk '{print $2}' | med)
    echo "wasm2c/$b $m $v ms"
  done
done
for w in kernels kernels_cnt; do
  for m in sig mm; do
    for f in "" --fuel; do
      v=$(venv/bin/python wt/run_wasmtime.py k/$w.wasm $m $f 2>/dev/null | grep -o "run [0-9.]* ms" | awk '{print $2}' | med)
      echo "wasmtime/$w $m $f $v ms"
    done
  done
done
v=$(native/plain | awk '{print $5}' | med); echo "plain gcc sig $v ms"
v=$(native/plain | awk '{print $8}' | med); echo "plain gcc mm $v ms"
native/sig_native 2>/dev/null | grep native-emu
WALL=1 w2c/host mc 5 | grep -o "cores [0-9.]* ms" 
WALL=1 w2c/host_cnt mc 5 | grep -o "cores [0-9.]* ms"
