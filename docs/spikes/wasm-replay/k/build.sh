#!/bin/sh
set -e
cd /work/spike-wasm/k
CXX="clang-19 --target=wasm32-wasi -std=c++17 -O2 -fno-exceptions -I/work/spike-wasm/wasm_include -I/work/main/sandbox/bang_emu/include -isystem /usr/include/wasm32-wasi/c++/v1"
clang-19 --target=wasm32-wasi -O2 -c support.c -o support.o
for f in sigmoid_vector matmul_scalar_gdram matmul_multicore attack mc; do $CXX -c $f.w.cpp -o $f.o; done
clang-19 --target=wasm32-wasi -O2 -nostartfiles -Wl,--no-entry -Wl,--stack-first -Wl,-z,stack-size=262144 \
  -Wl,--import-memory -Wl,--initial-memory=4194304 -Wl,--max-memory=4294967296 -Wl,--export=__heap_base -Wl,--export=__stack_pointer \
  support.o sigmoid_vector.o matmul_scalar_gdram.o matmul_multicore.o attack.o mc.o -nostdlib /work/spike-wasm/devlibc.a /usr/lib/llvm-19/lib/clang/19/lib/wasi/libclang_rt.builtins-wasm32.a -o kernels.wasm
wasm-objdump -x -j Import kernels.wasm
wasm-objdump -x -j Export kernels.wasm
ls -l kernels.wasm
