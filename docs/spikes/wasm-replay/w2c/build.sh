#!/bin/sh
# wasm2c builds: plain (kernels.wasm) and instrumented (binaryen --instrument-memory)
set -e
cd /work/spike-wasm/w2c
RT=.
mkdir -p plain && wasm2c ../k/kernels.wasm -n kernels -o plain/kernels.c
wasm-opt ../k/kernels.wasm --instrument-memory -O2 -o ../k/kernels_instr.wasm
mkdir -p instr && wasm2c ../k/kernels_instr.wasm -n kernels -o instr/kernels.c
CC="gcc -O2 -Iplain -I$RT -DHAVE_ATTACK -DHAVE_MC"
$CC -o host plain/kernels.c host.c $RT/wasm-rt-impl.c -lm -lpthread
gcc -O2 -Iinstr -I$RT -DHAVE_ATTACK -DHAVE_MC -o host_instr instr/kernels.c host.c $RT/wasm-rt-impl.c -lm -lpthread
# LTO variant: lets gcc inline the host's hooks into the kernel code
gcc -O2 -flto -Iinstr -I$RT -DHAVE_ATTACK -DHAVE_MC -o host_instr_lto instr/kernels.c host.c $RT/wasm-rt-impl.c -lm -lpthread
# in-wasm counters (count_pass.py): host reads exported i64 globals after the run
python3 ../count_pass.py ../k/kernels.wasm ../k/kernels_cnt.wasm
wasm-opt --enable-mutable-globals --enable-sign-ext ../k/kernels_cnt.wasm -O2 -o ../k/kernels_cnt.wasm
mkdir -p cnt && wasm2c ../k/kernels_cnt.wasm -n kernels -o cnt/kernels.c
gcc -O2 -Icnt -I$RT -DHAVE_ATTACK -DHAVE_MC -DHAVE_CNT -o host_cnt cnt/kernels.c host.c $RT/wasm-rt-impl.c -lm -lpthread
