"""The WebAssembly substrate of the trusted replay (issue 37, DESIGN.md "Confinement by construction"): the build
side. build.py compiles a submission's device code for wasm32 and links it into one module, imports.py checks that
it imports nothing but the host's memory and builtins, counting.py adds the scalar counters (wasm globals the
kernel cannot name), binary.py reads and writes the format, layout.py fixes the linear memory's regions and maps
the journal's device addresses into them, sites.py exports each launch site's invoker under the name the native
journal's launch record reduces to. Not wired into the replay yet: the replay still runs the native device module.
"""
