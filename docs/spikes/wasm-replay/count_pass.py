"""Spike instrumentation pass (post-link, on wasm2wat text): every scalar load/store of the module bumps one of
six i64 globals -- loads/stores x {gdram, on-chip, stack/data} -- classified by its effective address. The globals
are created here, after the kernel was compiled and linked, so no code of the kernel names them; a wasm global is
not in linear memory, so no store can reach it. They are exported for the host to read (and reset) after a run.
Usage: count_pass.py in.wasm out.wasm"""
import re, subprocess, sys
GDRAM_BASE, ONCHIP_BASE = 64 << 20, 1 << 20
wat = subprocess.run(["wasm2wat", sys.argv[1]], capture_output=True, text=True, check=True).stdout.splitlines()
MEM = re.compile(r"^(\s*)(i32|i64|f32|f64)\.(load|store)(\d*)(_[su])?((?:\s+offset=\d+)?(?:\s+align=\d+)?)\s*$")
out, globals_done = [], False
names = [f"$__cnt_{k}_{s}" for k in ("ld", "st") for s in ("gdram", "onchip", "other")]

def classify(ind, kind, off):
    # stack: [..., addr] -> [..., addr]; effective address = addr + offset
    g = lambda s: f"$__cnt_{kind}_{s}"
    return [f"{ind}local.tee $__a", f"{ind}local.get $__a", f"{ind}i32.const {off}", f"{ind}i32.add",
            f"{ind}local.tee $__e",
            f"{ind}i32.const {GDRAM_BASE}", f"{ind}i32.ge_u",
            f"{ind}if", f"{ind}  global.get {g('gdram')}", f"{ind}  i64.const 1", f"{ind}  i64.add", f"{ind}  global.set {g('gdram')}",
            f"{ind}else", f"{ind}  local.get $__e", f"{ind}  i32.const {ONCHIP_BASE}", f"{ind}  i32.ge_u",
            f"{ind}  if", f"{ind}    global.get {g('onchip')}", f"{ind}    i64.const 1", f"{ind}    i64.add", f"{ind}    global.set {g('onchip')}",
            f"{ind}  else", f"{ind}    global.get {g('other')}", f"{ind}    i64.const 1", f"{ind}    i64.add", f"{ind}    global.set {g('other')}",
            f"{ind}  end", f"{ind}end"]

i = 0
while i < len(wat):
    line = wat[i]
    if re.match(r"^\s*\(func ", line):
        out.append(line); i += 1
        while i < len(wat) and re.match(r"^\s*\(local ", wat[i]):
            out.append(wat[i]); i += 1
        out.append("    (local $__a i32) (local $__e i32) (local $__vi32 i32) (local $__vi64 i64) (local $__vf32 f32) (local $__vf64 f64)")
        continue
    m = MEM.match(line)
    if m:
        ind, ty, op, _, _, rest = m.groups()
        off = int(re.search(r"offset=(\d+)", rest).group(1)) if "offset=" in rest else 0
        if op == "load":
            out += classify(ind, "ld", off)
        else:
            out.append(f"{ind}local.set $__v{ty}")
            out += classify(ind, "st", off)
            out.append(f"{ind}local.get $__v{ty}")
        out.append(line); i += 1
        continue
    if re.match(r"^\s*\(export ", line) and not globals_done:
        globals_done = True
        for n in names:
            out.append(f"  (global {n} (mut i64) (i64.const 0))")
            out.append(f'  (export "{n[1:]}" (global {n}))')
    out.append(line); i += 1
open("/tmp/count_pass.wat", "w").write("\n".join(out) + "\n")
subprocess.run(["wat2wasm", "/tmp/count_pass.wat", "-o", sys.argv[2]], check=True)
