"""Build devlibc.a: the members of wasi-libc's libc.a that neither define nor reach WASI imports, stdio, exit or
malloc (pure functions: libm, string.h, qsort ...), closed under their own references. Device code links with
-nostdlib against this archive only, so the module's imports are exactly what the host offers."""
import os, subprocess, tempfile
d = tempfile.mkdtemp()
subprocess.run(["ar", "x", "/usr/lib/wasm32-wasi/libc.a"], cwd=d, check=True)
objs = [f for f in os.listdir(d) if f.endswith(".o")]
defs, undefs = {}, {}
for o in objs:
    out = subprocess.run(["llvm-nm-19", o], cwd=d, capture_output=True, text=True).stdout
    dd, u = set(), set()
    for line in out.splitlines():
        p = line.split()
        if len(p) == 2 and p[0] == "U": u.add(p[1])
        elif len(p) == 3 and p[1] in "TDBRVWdtbr": dd.add(p[2])
    defs[o], undefs[o] = dd, u
BANNED = {"stdout", "stderr", "stdin", "exit", "_Exit", "abort", "__stdio_exit", "fopen", "malloc", "free", "calloc",
          "realloc", "sbrk"}
banned = lambda s: s.startswith(("__wasi", "__imported_wasi")) or s in BANNED
RT = ("__extend", "__trunc", "__mul", "__div", "__add", "__sub", "__fix", "__float", "__lt", "__gt", "__eq", "__ne",
      "__ge", "__le", "__unord", "__ashl", "__lshr", "__ashr", "__compiler_rt", "__stack_pointer", "__memory_base",
      "__table_base", "__indirect_function_table")
keep = {o for o in objs if not any(banned(s) for s in undefs[o] | defs[o])}
changed = True
while changed:
    changed = False
    provided = set().union(*(defs[o] for o in keep))
    for o in list(keep):
        if any(s not in provided and not s.startswith(RT) for s in undefs[o]):
            keep.discard(o); changed = True
subprocess.run(["llvm-ar-19", "rcs", os.path.abspath("devlibc.a")] + sorted(keep), cwd=d, check=True)
print(len(keep), "members kept of", len(objs))
