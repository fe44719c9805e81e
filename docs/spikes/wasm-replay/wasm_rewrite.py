"""Spike rewriter for the wasm flavour: on-chip declarations inside functions become per-call references into
the core's arena (the host's onchip_alloc import); `k<<<cfg>>>(args)` becomes a plain call (host entries are
never run by the replay; the real design generates one exported invoker per launch site)."""
import re, sys
SPACES = {"__nram__": 0, "__wram__": 1, "__mlu_shared__": 2}
DECL = re.compile(r"(__nram__|__wram__|__mlu_shared__)\s+([A-Za-z_][\w:<>\s\*]*?)\s+([A-Za-z_]\w*)\s*((?:\[[^\]]+\])+)\s*;")
idx = [0]
def decl(m):
    space, ty, name, dims = SPACES[m.group(1)], m.group(2).strip(), m.group(3), m.group(4)
    i = idx[0]; idx[0] += 1
    return (f"{ty} (&{name}){dims} = *reinterpret_cast<{ty}(*){dims}>("
            f"__bang_onchip_alloc({space}, sizeof({ty}{dims}), {i}));")
src = open(sys.argv[1]).read()
src = DECL.sub(decl, src)
src = re.sub(r"<<<.*?>>>", "", src, flags=re.S)
open(sys.argv[2], "w").write(src)
