"""wasmtime (PyPI) host for the spike: the same module, the same "bang" imports as Python host functions,
optional fuel metering. Clock/counters are Python objects of this process, outside linear memory."""
import ctypes, sys, time
import numpy as np
import wasmtime as wt

KiB, MiB = 1024, 1024 * 1024
NRAM_SIZE, WRAM_SIZE, SRAM_SIZE = 768 * KiB, 1024 * KiB, 4 * MiB
ONCHIP_BASE = 1 * MiB
NRAM_BASE = lambda c: ONCHIP_BASE + c * NRAM_SIZE
WRAM_BASE = lambda c: ONCHIP_BASE + 4 * NRAM_SIZE + c * WRAM_SIZE
SRAM_BASE = ONCHIP_BASE + 4 * (NRAM_SIZE + WRAM_SIZE)
GDRAM_BASE, GDRAM_END = 64 * MiB, 128 * MiB


class KernelError(Exception):
    pass


class Core:
    def __init__(self, core=0, ncores=1):
        self.core, self.clock, self.dma, self.vec = core, 0.0, 0, 0
        self.vars = [core, 0, 0, ncores, 1, 1, core, ncores, core if ncores > 1 else 0, 4 if ncores > 1 else 1, 0, 1 if ncores > 1 else 0]
        self.onchip = {}
        self.used = [0, 0, 0]
        self.loads = self.stores = 0


def build(wasm_path, fuel, core):
    cfg = wt.Config()
    cfg.consume_fuel = fuel
    cfg.cranelift_opt_level = "speed"
    engine = wt.Engine(cfg)
    store = wt.Store(engine)
    if fuel:
        store.set_fuel(10**15)
    module = wt.Module.from_file(engine, wasm_path)
    mem = wt.Memory(store, wt.MemoryType(wt.Limits(GDRAM_END // 65536, 65536)))
    base = ctypes.addressof(mem.data_ptr(store).contents)
    arr = np.ctypeslib.as_array((ctypes.c_uint8 * GDRAM_END).from_address(base))
    linker = wt.Linker(engine)
    i32 = wt.ValType.i32()
    f32 = wt.ValType.f32()

    def operand(off, n, lo, hi, what):
        if off < lo or off + n > hi:
            raise KernelError(what)
        return off

    def space(sp):
        return {0: (GDRAM_BASE, GDRAM_END), 1: (NRAM_BASE(core.core), NRAM_BASE(core.core) + NRAM_SIZE),
                4: (WRAM_BASE(core.core), WRAM_BASE(core.core) + WRAM_SIZE)}[sp]
    DIR = {0: (1, 0), 1: (0, 1)}

    def memcpy(dst, src, size, d, asyn):
        if d not in DIR or size < 0:
            raise KernelError("__memcpy direction")
        ds, ss = DIR[d]
        operand(dst, size, *space(ds), "__memcpy dst"); operand(src, size, *space(ss), "__memcpy src")
        arr[dst:dst + size] = arr[src:src + size]
        core.dma += size; core.clock += 200 + size / 32

    def sigmoid(d, s, n):
        lo, hi = space(1)
        operand(d, 4 * n, lo, hi, "sigmoid dst"); operand(s, 4 * n, lo, hi, "sigmoid src")
        x = arr[s:s + 4 * n].view(np.float32)
        with np.errstate(over="ignore"):
            y = (1.0 / (1.0 + np.exp(-x))).astype(np.float32)
        y[x <= -7.75] = 0; y[x >= 7.75] = 1
        arr[d:d + 4 * n] = y.view(np.uint8)
        core.vec += n; core.clock += 30 + n / 16

    def onchip_alloc(sp, nbytes, index):
        key = (sp, index)
        if key not in core.onchip:
            at = (core.used[sp] + 127) & ~127
            cap = [NRAM_SIZE, WRAM_SIZE, SRAM_SIZE][sp]
            if at + nbytes > cap:
                raise KernelError("nram_overflow")
            core.used[sp] = at + nbytes
            core.onchip[key] = at
        return [NRAM_BASE(core.core), WRAM_BASE(core.core), SRAM_BASE][sp] + core.onchip[key]

    def unsupported(*a):
        raise KernelError("not in spike")

    def sync(which):
        core.clock += 50

    def load_ptr(i, b, o, a):
        core.loads += 1
        return a

    def store_ptr(i, b, o, a):
        core.stores += 1
        return a

    ft = lambda p, r=(): wt.FuncType([{"i": i32, "f": f32, "I": wt.ValType.i64(), "F": wt.ValType.f64()}[c] for c in p],
                                     [{"i": i32, "f": f32, "I": wt.ValType.i64(), "F": wt.ValType.f64()}[c] for c in r])
    defs = {
        "task_var": (ft("i", "i"), lambda w: core.vars[w]),
        "onchip_alloc": (ft("iii", "i"), onchip_alloc),
        "memcpy": (ft("iiiii"), memcpy),
        "memcpy_strided": (ft("iiiiiiii"), unsupported),
        "active_sigmoid_f32": (ft("iii"), sigmoid),
        "add_f32": (ft("iiii"), unsupported),
        "matmul_f32": (ft("iiiiii"), unsupported),
        "transpose": (ft("iiiii"), unsupported),
        "write_zero": (ft("ii"), unsupported),
        "sync": (ft("i"), sync),
    }
    for imp in module.imports:
        if imp.module == "bang":
            t, fn = defs[imp.name]
            linker.define_func("bang", imp.name, t, fn)
        elif imp.module == "env" and imp.name == "memory":
            linker.define(store, "env", "memory", mem)
        elif imp.module == "env":
            k = imp.name
            if k in ("load_ptr", "store_ptr"):
                linker.define_func("env", k, ft("iiii", "i"), load_ptr if k == "load_ptr" else store_ptr)
            else:
                c = {"i32": "i", "i64": "I", "f32": "f", "f64": "F"}[k[-3:]]
                linker.define_func("env", k, ft("i" + c, c), lambda i, v: v)
        else:
            raise SystemExit(f"refused import {imp.module}.{imp.name}")
    inst = linker.instantiate(store, module)
    return store, inst, arr, mem


def main():
    wasm = sys.argv[1]
    mode = sys.argv[2]
    fuel = "--fuel" in sys.argv
    reps = int(__import__("os").environ.get("REPS", "7"))
    core = Core()
    t0 = time.thread_time()
    store, inst, arr, mem = build(wasm, fuel, core)
    t1 = time.thread_time()
    print(f"compile+instantiate {1e3*(t1-t0):.1f} ms (fuel={fuel})")
    ex = inst.exports(store)
    N, S = 1 << 20, 256
    hx = (((np.arange(N) % 2001) - 1000) / 100.0).astype(np.float32)
    X, Y = GDRAM_BASE, GDRAM_BASE + 4 * N
    A = GDRAM_BASE + 8 * N; B = A + 4 * S * S; C = B + 4 * S * S
    arr[X:X + 4 * N] = hx.view(np.uint8)
    arr[A:A + 4 * S * S] = hx[:S * S].view(np.uint8)
    arr[B:B + 4 * S * S] = hx[5:5 + S * S].view(np.uint8)
    if mode == "attack":
        import ctypes as C
        clock = C.c_double(0.0)
        host_addr = C.addressof(clock)
        for k in range(8):
            sp = ex["__stack_pointer"].value(store)
            try:
                ex["attack"](store, k, host_addr)
                res = "returned"
            except wt.Trap as e:
                res = "trap: " + (str(e.trap_code) if e.trap_code is not None else "") + " " + [l for l in str(e).splitlines() if "trap" in l or "stack" in l or "bounds" in l][-1][:70]
            except KernelError as e:
                res = "kernel error: " + str(e)
            except Exception as e:
                res = type(e).__name__ + ": " + str(e).splitlines()[0][:80]
            ex["__stack_pointer"].set_value(store, wt.Val.i32(sp))
            print(f"attack {k}: {res}; host clock {clock.value} (at {host_addr:#x})")
        return
    for r in range(reps):
        f0 = store.get_fuel() if fuel else 0
        t0 = time.thread_time()
        if mode == "sig":
            ex["sig_f32"](store, X, Y, N)
        elif mode == "mm":
            ex["mm_scalar_f32"](store, A, B, C, S, S, S)
        t1 = time.thread_time()
        used = (f0 - store.get_fuel()) if fuel else None
        cnt = {k: ex[k].value(store) for k in ("__cnt_ld_gdram", "__cnt_ld_onchip", "__cnt_ld_other", "__cnt_st_gdram", "__cnt_st_onchip", "__cnt_st_other") if k in ex}
        for k in cnt:
            ex[k].set_value(store, wt.Val.i64(0))
        print(f"{mode}: run {1e3*(t1-t0):.1f} ms, fuel used {used}, modelled {core.clock:.0f} cycles, hook loads {core.loads} stores {core.stores}, in-wasm counters {cnt}")
        core.clock = 0; core.loads = core.stores = 0
    if mode == "sig":
        y = arr[Y:Y + 4 * N].view(np.float32)
        ref = 1 / (1 + np.exp(-hx.astype(np.float64))); ref[hx <= -7.75] = 0; ref[hx >= 7.75] = 1
        print("sigmoid max abs err", float(np.max(np.abs(ref - y))))
    else:
        c = arr[C:C + 16].view(np.float32)
        print("matmul c[0..3]", c)
    if mode == "attack":
        pass


if __name__ == "__main__":
    main()
