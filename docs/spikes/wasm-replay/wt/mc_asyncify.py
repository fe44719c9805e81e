"""Four cores of a cluster in ONE wasm instance on ONE host thread (wasmtime, deterministic): binaryen's asyncify
unwinds a core at __sync_cluster, the host runs the next core up to the barrier, then rewinds each in turn.
Each core has its own C stack region (the __stack_pointer global saved/restored by the host) and own NRAM."""
import sys, time
import numpy as np
import wasmtime as wt
sys.path.insert(0, ".")
import run_wasmtime as R

fuel = "--fuel" in sys.argv
cores = [R.Core(c, 4) for c in range(4)]
cur = [0]
proxy = type("P", (), {})()


class CoreProxy:  # the imports of run_wasmtime.build read `core.*`: route them to the running core
    def __getattr__(self, k):
        return getattr(cores[cur[0]], k)

    def __setattr__(self, k, v):
        setattr(cores[cur[0]], k, v)


store, inst, arr, mem = R.build(sys.argv[1], fuel, CoreProxy())
ex = inst.exports(store)
state = {"rewinding": [False] * 4, "at_barrier": [False] * 4}
BUF = [R.SRAM_BASE + R.SRAM_SIZE + c * 65536 for c in range(4)]  # asyncify save areas (host-chosen, per core)
STACK_TOP = [256 * 1024 - c * 64 * 1024 for c in range(4)]
saved_sp = [0] * 4


# replace the sync import: re-instantiate with a linker whose bang.sync unwinds
def build_with_sync():
    cfg = wt.Config(); cfg.consume_fuel = fuel
    engine = wt.Engine(cfg); st = wt.Store(engine)
    if fuel: st.set_fuel(10**15)
    module = wt.Module.from_file(engine, sys.argv[1])
    m = wt.Memory(st, wt.MemoryType(wt.Limits(R.GDRAM_END // 65536, 65536)))
    linker = wt.Linker(engine)
    i32 = wt.ValType.i32()
    holder = {}

    def sync(which):
        c = cur[0]
        if state["rewinding"][c]:
            holder["ex"]["asyncify_stop_rewind"](st)
            state["rewinding"][c] = False
            cores[c].clock += 50
            return
        # unwind: the core stops here until every core of the cluster has arrived
        a = arr_view()
        a[BUF[c]:BUF[c] + 8] = np.array([BUF[c] + 8, BUF[c] + 65536], dtype=np.uint32).view(np.uint8)
        holder["ex"]["asyncify_start_unwind"](st, BUF[c])
        state["at_barrier"][c] = True

    import ctypes
    base = ctypes.addressof(m.data_ptr(st).contents)
    a = np.ctypeslib.as_array((ctypes.c_uint8 * R.GDRAM_END).from_address(base))
    arr_view = lambda: a
    for imp in module.imports:
        if imp.module == "env":
            linker.define(st, "env", "memory", m)
    # reuse the other imports from run_wasmtime, bound to this store/memory
    return st, module, m, a, linker, sync, holder


st, module, m, a, linker, sync, holder = build_with_sync()
# define the bang imports like run_wasmtime does (copying its closures would be cleaner; the spike re-declares the few used)
i32 = wt.ValType.i32()
ft = lambda n, r=0: wt.FuncType([i32] * n, [i32] * r)
def task_var(w): return cores[cur[0]].vars[w]
def onchip_alloc(sp, nbytes, index):
    c = cores[cur[0]]
    key = (sp, index)
    if key not in c.onchip:
        at = (c.used[sp] + 127) & ~127; c.used[sp] = at + nbytes; c.onchip[key] = at
    return [R.NRAM_BASE(c.core), R.WRAM_BASE(c.core), R.SRAM_BASE][sp] + c.onchip[key]
def unsupported(*x): raise R.KernelError("nyi")
sigs = {"task_var": (ft(1, 1), task_var), "onchip_alloc": (ft(3, 1), onchip_alloc), "sync": (ft(1), sync),
        "memcpy": (ft(5), unsupported), "memcpy_strided": (ft(8), unsupported), "add_f32": (ft(4), unsupported),
        "matmul_f32": (ft(6), unsupported), "transpose": (ft(5), unsupported), "write_zero": (ft(2), unsupported),
        "active_sigmoid_f32": (ft(3), unsupported)}
for imp in module.imports:
    if imp.module == "bang":
        linker.define_func("bang", imp.name, *sigs[imp.name])
inst = linker.instantiate(st, module)
ex = inst.exports(st); holder["ex"] = ex
N = 1 << 20
hx = (((np.arange(N) % 2001) - 1000) / 100.0).astype(np.float32)
X, Y = R.GDRAM_BASE, R.GDRAM_BASE + 4 * N
a[X:X + 4 * N] = hx.view(np.uint8)
for rep in range(3):
    t0 = time.perf_counter(); f0 = st.get_fuel() if fuel else 0
    for c in range(4):
        cores[c].clock = 0
        state["at_barrier"][c] = False
    # phase 1: run each core until it unwinds at the barrier (or finishes)
    for c in range(4):
        cur[0] = c
        ex["__stack_pointer"].set_value(st, wt.Val.i32(STACK_TOP[c]))
        ex["mc_reduce"](st, X, Y, N)
        if state["at_barrier"][c]:
            ex["asyncify_stop_unwind"](st)
            saved_sp[c] = ex["__stack_pointer"].value(st)
    # phase 2: all arrived -> release: rewind each core in turn and let it run to the end
    for c in range(4):
        cur[0] = c
        ex["__stack_pointer"].set_value(st, wt.Val.i32(saved_sp[c]))
        state["rewinding"][c] = True
        ex["asyncify_start_rewind"](st, BUF[c])
        ex["mc_reduce"](st, X, Y, N)
    t1 = time.perf_counter()
    y0 = a[Y:Y + 4].view(np.float32)[0]
    print(f"asyncify 4 cores, 1 thread: {1e3*(t1-t0):.1f} ms, y[0]={y0:.3f} (float64 {hx.astype(np.float64).sum():.3f}), "
          f"clocks {[c.clock for c in cores]}, fuel {(f0 - st.get_fuel()) if fuel else None}")
    a[Y:Y + 4] = 0
