"""cncc-emu: cncc's command line, the source rewrite, build-time capacity checks, the toolchain API."""

from __future__ import annotations

import subprocess

import pytest
from bang_emu import rewrite, toolchain
from emu_helpers import PROGRAMS, cncc, run


def test_lab_style_sigmoid_builds_and_runs_unchanged(build):
    exe = build(PROGRAMS / "sigmoid_lab.mlu")
    proc = run(exe, 1000003, 16)
    assert proc.returncode == 0, proc.stderr
    assert "PASSED" in proc.stdout
    # the hardware builtin saturates beyond +-7.75, and is exact inside
    fields = dict(kv.split("=") for kv in proc.stdout.split()[:4])
    assert 4.0e-4 < float(fields["max_err"]) < 4.4e-4
    assert float(fields["max_err_inside"]) < 1e-6


def test_sixteen_million_sigmoid_emulates_in_seconds(build):
    exe = build(PROGRAMS / "sigmoid_lab.mlu")
    proc = run(exe, 1 << 24, 64, timeout=60)
    assert "PASSED" in proc.stdout, proc.stderr


def test_templates_namespaces_union_sram_strides_and_printf(build):
    proc = run(build(PROGRAMS / "features.mlu"))
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "scale: 3 765" in out
    assert "negate: -0 -3 6" in out  # deduced negate<float>, applied to the first 2 elements
    assert "cluster sums: 6 22" in out  # UNION2: cluster 0 = tasks 0..3, cluster 1 = tasks 4..7
    assert "strided: 0 64 128 192 scratch 128" in out
    assert "kernel printf: taskDim=1 clusterDim=0" in out


def test_cncc_flags_are_accepted_and_foreign_ones_noted(tmp_path):
    exe = tmp_path / "sig"
    proc = cncc("--bang-mlu-arch=mtp_372", "--bang-mlu-arch=mtp_592", "-O3", "-g", "-std=c++11", "-DUNUSED=1",
                "-I", tmp_path, "-mllvm", "-enable-mlisa-sanitizer", "--bang-stack-on-ldram", "-lcnrt", "-lcndrv",
                PROGRAMS / "sigmoid_lab.mlu", "-o", exe)
    assert proc.returncode == 0, proc.stderr
    assert "ignoring cncc flag -mllvm -enable-mlisa-sanitizer" in proc.stderr
    assert "ignoring cncc flag --bang-stack-on-ldram" in proc.stderr
    assert "PASSED" in run(exe, 4096, 2).stdout


def test_object_files_link_with_a_plain_cpp_host(tmp_path):
    mlu = tmp_path / "k.mlu"
    mlu.write_text(
        '#include <bang.h>\n#include <bang_emu/external.h>\n'
        '__mlu_global__ void add_one(float *x, int n) {\n'
        '  __nram__ float b[1024];\n'
        '  __memcpy(b, x, n * 4, GDRAM2NRAM); __bang_add_scalar(b, b, 1.0f, n); __memcpy(x, b, n * 4, NRAM2GDRAM);\n'
        '}\n'
        'extern "C" int add_one_entry(float *x, int n) {\n'
        '  cnrtDim3_t dim = {1, 1, 1};\n'
        '  add_one<<<dim, CNRT_FUNC_TYPE_BLOCK, bang_emu_default_queue()>>>(x, n);\n'
        '  return (int)cnrtQueueSync(bang_emu_default_queue());\n'
        '}\n')
    host = tmp_path / "host.cpp"
    host.write_text(
        '#include <cnrt.h>\n#include <bang_emu/external.h>\n#include <vector>\n#include <cstdio>\n'
        'extern "C" int add_one_entry(float *x, int n);\n'
        'int main() {\n'
        '  std::vector<float> v(100, 2.0f);\n'  # host memory registered as an external GDRAM buffer
        '  bang_emu_register_gdram(v.data(), v.size() * 4, "tensor v");\n'
        '  bang_emu_register_gdram(v.data(), v.size() * 4, "tensor v");\n'
        '  int rc = add_one_entry(v.data(), 100);\n'
        '  int rc2 = add_one_entry(v.data(), 101);\n'  # one element past the registered buffer
        '  bang_emu_unregister_gdram(v.data());\n'
        '  std::printf("%d %g %d\\n", rc, v[99], rc2 != 0);\n'
        '}\n')
    obj = tmp_path / "k.o"
    proc = cncc("-c", "-fPIC", mlu, "-o", obj)
    assert proc.returncode == 0, proc.stderr
    exe = tmp_path / "app"
    inc = [f"-I{d}" for d in toolchain.include_dirs()]
    link = subprocess.run(["g++", "-std=c++17", *inc, str(host), str(obj), "-o", str(exe),
                           *toolchain.runtime_link_args()], capture_output=True, text=True)
    assert link.returncode == 0, link.stderr
    proc = run(exe)
    assert proc.stdout.split() == ["0", "3", "1"], proc.stdout + proc.stderr
    assert "gdram-out-of-bounds" in proc.stderr and "tensor v" in proc.stderr


def test_compile_errors_point_at_the_students_line(tmp_path):
    src = tmp_path / "broken.mlu"
    src.write_text("#include <bang.h>\n\n__mlu_entry__ void k(float *x) {\n  x[0] = undeclared_name;\n}\n")
    proc = cncc(src, "-o", tmp_path / "b")
    assert proc.returncode != 0
    assert "broken.mlu:4" in proc.stderr and "undeclared_name" in proc.stderr


@pytest.mark.parametrize(
    ("decl", "arch", "space", "cap"),
    [
        ("__nram__ float big[200 * 1024];", "mtp_372", "NRAM", "768 KB"),
        ("__wram__ float big[300 * 1024];", "mtp_372", "WRAM", "1024 KB"),
        ("__mlu_shared__ float big[1100 * 1024];", "mtp_372", "SRAM", "4096 KB"),
        ("__nram__ float big[150 * 1024];", "mtp_270", "NRAM", "512 KB"),
    ],
)
def test_oversized_onchip_arrays_are_refused_at_build_time(tmp_path, decl, arch, space, cap):
    src = tmp_path / "big.mlu"
    src.write_text(f"#include <bang.h>\n__mlu_entry__ void k(float *x) {{\n  {decl}\n  x[0] = 0;\n}}\n")
    proc = cncc(f"--bang-mlu-arch={arch}", src, "-o", tmp_path / "big")
    assert proc.returncode != 0
    assert "onchip-overflow" in proc.stderr and space in proc.stderr and cap in proc.stderr
    assert "big.mlu:3" in proc.stderr and "'big'" in proc.stderr
    assert not (tmp_path / "big").exists()


def test_capacity_counts_every_array_of_the_unit(tmp_path):
    # two arrays that fit one by one but not together (600 KB NRAM each on a 768 KB core)
    src = tmp_path / "two.mlu"
    src.write_text("#include <bang.h>\n__nram__ char a[600 * 1024];\n"
                   "__mlu_entry__ void k(char *x) {\n  __nram__ char b[600 * 1024];\n  x[0] = a[0] + b[0];\n}\n")
    proc = cncc(src, "-o", tmp_path / "two")
    assert proc.returncode != 0 and "1200.0 KB" in proc.stderr


def test_rewrite_keeps_lines_and_translates_launches():
    text = ('# 1 "k.mlu"\n'
            'void f() {\n'
            '  ns::kern<float, 2>\n'
            '     <<<dim, CNRT_FUNC_TYPE_BLOCK, q>>>(a,\n'
            '                                       b);\n'
            '  printf("<<<not a launch>>>");\n'
            '  k2<<<d, t>>>();\n'
            '  __nram__ float x[4], y[8];\n'
            '}\n')
    res = rewrite.rewrite(text)
    assert res.text.count("\n") == text.count("\n")
    assert res.launches == 2
    # each site tagged by the file's hash, its line and its index (the trusted replay's key, device.h)
    tag = f"{int.from_bytes(__import__('hashlib').sha256(b'k.mlu').digest()[:8], 'little')}ULL"
    assert (f'::bang_emu::launch_cfg<::bang_emu::SiteTag<{tag}, 3, 0>>("ns::kern<float,2>", "k.mlu", 3, dim,  '
            'CNRT_FUNC_TYPE_BLOCK,  q, [](auto &...__bang_emu_a) { ns::kern<float, 2>\n     (__bang_emu_a...); }, a,\n'
            ) in res.text
    assert (f'::bang_emu::launch_cfg2<::bang_emu::SiteTag<{tag}, 6, 1>>("k2", "k.mlu", 6, d,  t, '
            '[](auto &...__bang_emu_a) { k2(__bang_emu_a...); })') in res.text
    assert '"<<<not a launch>>>"' in res.text
    assert [(d.name, d.line) for d in res.onchip] == [("x", 7), ("y", 7)]
    assert "thread_local float (&x)[4]" in res.text and "thread_local float (&y)[8]" in res.text


def test_toolchain_api():
    dirs = toolchain.include_dirs()
    assert (dirs[0] / "cnrt.h").exists() and (dirs[0] / "bang.h").exists()
    args = toolchain.runtime_link_args()
    assert "-lbang_emu" in args
    lib_dir = toolchain.runtime_dir()
    assert (lib_dir / toolchain.LIB_NAME).exists()
    assert lib_dir.name == toolchain.runtime_hash()


@pytest.mark.slow
def test_compile_mlu_api_and_prebuilt_runtime(tmp_path):
    proc = toolchain.compile_mlu(PROGRAMS / "sigmoid_lab.mlu", tmp_path / "s", ["-O2"])
    assert proc.returncode == 0, proc.stderr
    prebuilt = cncc("--prebuild-runtime", tmp_path / "rt")
    assert prebuilt.returncode == 0, prebuilt.stderr
    assert (tmp_path / "rt" / toolchain.runtime_hash() / toolchain.LIB_NAME).exists()


def test_rewrite_tells_a_comparison_in_the_dims_from_an_initializer():
    # A template kernel sizing a buffer by its element type: the '==' is part of the dims, '= {1, 2}' is not.
    text = ('# 1 "k.mlu"\n'
            'template <typename T> void f() {\n'
            '  __nram__ T rounded[sizeof(T) == sizeof(float) ? 1 : 64], z[2] = {1, 2};\n'
            '}\n')
    res = rewrite.rewrite(text)
    assert [(d.name, d.line) for d in res.onchip] == [("rounded", 2), ("z", 2)]
    assert "thread_local T (&rounded)[sizeof(T)==sizeof(float)?1:64]" in res.text
    assert "static const T __init[2] = {1, 2};" in res.text


# ------------------------------------------------------------------------------------------ cncc compatibility
MIXED_ONCHIP = r'''
#include <bang.h>
#include <bang_device_functions_decls.h>
#include <bang_device_types.h>
struct Pair { float a; int b; };
__nram__ char g_nram[1024];
__mlu_shared__ float g_sram[256];
static __wram__ float g_wram[64];
template <typename T>
__mlu_func__ T first(const T *src) {
  __nram__ T tmp[64];
  __wram__ T w[64];
  __memcpy(tmp, src, 64 * sizeof(T), GDRAM2NRAM);
  __memcpy(w, tmp, 64 * sizeof(T), NRAM2WRAM);
  return tmp[0];
}
__mlu_func__ inline float square(float x) { static __nram__ float t[4]; t[0] = x; return t[0] * x; }
__mlu_device__ float twice(float x) { __nram__ float u[2]; u[1] = 2 * x; return u[1]; }
float unqualified_helper(float x) { return x + 1; }  // called from a kernel: stays device code
template <typename T>
__mlu_global__ void tk(T *x) { __nram__ T v[8]; v[0] = first(x); x[1] = v[0] + (T)1; }
__mlu_entry__ void k(float *x) {
  __nram__ float a[128];
  __wram__ float w[128];
  static __nram__ Pair pairs[4];
  __nram__ const float tbl[4] = {1, 2, 3, 4};
  __mlu_shared__ float s[32], s2[16];
  __nram__ struct Pair more[2];
  pairs[0].a = tbl[2] + first(x);       // 3 + 5
  more[1].a = square(pairs[0].a);        // 64
  a[0] = more[1].a + twice(1.0f) + unqualified_helper(0.0f) + expf(0.0f) + fabsf(-1.0f) + fmax(0.0, 1.0);
  g_nram[0] = 1; s[0] = g_nram[0]; g_sram[0] = s[0];
  x[0] = a[0] + g_sram[0];               // 64 + 2 + 1 + 1 + 1 + 1 + 1 = 71
  (void)w; (void)s2; (void)g_wram;
}
float relative_error(float a, float b) { return fabs(a - b) / fmax(fabs(a), fabs(b)); }  // no <math.h>, as cncc
int main() {
  float h[64];
  for (int i = 0; i < 64; ++i) h[i] = 5.0f + i;
  float *d;
  CNRT_CHECK(cnrtMalloc((void **)&d, sizeof(h)));
  CNRT_CHECK(cnrtMemcpy(d, h, sizeof(h), cnrtMemcpyHostToDev));
  cnrtQueue_t q;
  CNRT_CHECK(cnrtQueueCreate(&q));
  cnrtDim3_t dim = {1, 1, 1};
  k<<<dim, cnrtFuncTypeBlock, q>>>(d);
  tk<<<dim, cnrtFuncTypeBlock, q>>>(d);
  CNRT_CHECK(cnrtQueueSync(q));
  CNRT_CHECK(cnrtMemcpy(h, d, sizeof(h), cnrtMemcpyDevToHost));
  printf("%g %g %.3f\n", h[0], h[1], relative_error(1.0f, 1.25f));
  return 0;
}
'''


def test_every_mix_of_onchip_declarations_math_and_qualifiers_builds_and_runs(tmp_path):
    # __nram__/__wram__/__mlu_shared__ in one function and file: namespace scope, static, const with an
    # initializer, arrays of structs, templates, inline __mlu_func__ (GCC once refused these with "section type
    # conflict"); the math library without <math.h> in host and device code; cncc's header names
    src = tmp_path / "mixed.mlu"
    src.write_text(MIXED_ONCHIP)
    exe = tmp_path / "mixed"
    proc = cncc("--bang-arch=compute_30", "-O3", src, "-o", exe)
    assert proc.returncode == 0, proc.stderr
    out = run(exe)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["71", "72", "0.200"], out.stdout + out.stderr


def test_arrays_of_an_inlined_function_are_counted_once(tmp_path):
    # a __mlu_func__ inlined into two kernels keeps one 500 KB array: fits; two such arrays: refused
    src = tmp_path / "inl.mlu"
    body = ("#include <bang.h>\n__mlu_func__ void f(char *x) {{ __nram__ char b[500 * 1024]; {extra}"
            "__memcpy(b, x, 64, GDRAM2NRAM); x[1] = b[0]; }}\n"
            "__mlu_entry__ void k1(char *x) {{ f(x); }}\n__mlu_entry__ void k2(char *x) {{ f(x); }}\n")
    src.write_text(body.format(extra=""))
    proc = cncc("-c", "-O3", src, "-o", tmp_path / "ok.o")
    assert proc.returncode == 0, proc.stderr
    src.write_text(body.format(extra="__nram__ char c[500 * 1024]; b[1] = c[0]; "))
    proc = cncc("-c", "-O3", src, "-o", tmp_path / "bad.o")
    assert proc.returncode != 0 and "onchip-overflow" in proc.stderr and "1000.0 KB" in proc.stderr


def test_only_device_functions_are_instrumented():
    text = ('# 1 "k.mlu"\n'
            '__mlu_func__ float sq(float x) { return x * x; }\n'
            'float helper(float x) { return sq(x); }\n'
            '__mlu_global__ void k(float *x) { x[0] = helper(x[0]); }\n'
            'template <typename T> static T host_ref(const T *a, int n) { T s = 0; for (int i = 0; i < n; ++i) s += a[i]; return s; }\n'
            'struct Timer { double now() { return 0; } };\n'
            'int main(int argc, char **argv) { return argc; }\n'
            '# 1 "/usr/include/stdio.h" 1 3 4\n'
            'static inline int sys_fn(int x) { return x; }\n')
    res = rewrite.rewrite(text)
    assert res.host_functions == ["host_ref", "main"]  # not sq/k (qualified), helper (called by k), sys_fn
    assert f"int main{rewrite.HOST_ATTRIBUTE}(int argc" in res.text
    assert f"static T host_ref{rewrite.HOST_ATTRIBUTE}(const T" in res.text
    assert "inline float sq(float x)" in res.text and "__mlu" not in res.text
    assert res.kernels == ["k"] and "register_kernel((const void *)&k," in res.text
    assert res.text.count("\n") == text.count("\n")


INVOKE_KERNEL_MLU = r'''
#include <mlu.h>
__mlu_entry__ void scale_kernel(half *out, half *in, int factor, float bias, int len) {
  __nram__ half buf[256];
  __memcpy(buf, in, len * sizeof(half), GDRAM2NRAM);
  for (int i = 0; i < len; ++i) buf[i] = buf[i] * (half)factor + (half)bias;
  __memcpy(out, buf, len * sizeof(half), NRAM2GDRAM);
}
'''
INVOKE_KERNEL_HOST = r'''
#include <stdio.h>
#include "cnrt.h"
typedef unsigned short half;
extern "C" void scale_kernel(half *out, half *in, int factor, float bias, int len);
int main() {
  CNRT_CHECK(cnrtInit(0));
  cnrtDev_t dev;
  CNRT_CHECK(cnrtGetDeviceHandle(&dev, 0));
  CNRT_CHECK(cnrtSetCurrentDevice(dev));
  cnrtQueue_t q;
  CNRT_CHECK(cnrtCreateQueue(&q));
  half h[16];
  for (int i = 0; i < 16; ++i) CNRT_CHECK(cnrtConvertFloatToHalf(&h[i], (float)i));
  half *din, *dout;
  CNRT_CHECK(cnrtMalloc((void **)&din, sizeof(h)));
  CNRT_CHECK(cnrtMalloc((void **)&dout, sizeof(h)));
  CNRT_CHECK(cnrtMemcpy(din, h, sizeof(h), CNRT_MEM_TRANS_DIR_HOST2DEV));
  int factor = 3, len = 16;
  float bias = 0.5f;
  cnrtKernelParamsBuffer_t params;
  CNRT_CHECK(cnrtGetKernelParamsBuffer(&params));
  CNRT_CHECK(cnrtKernelParamsBufferAddParam(params, &dout, sizeof(half *)));
  CNRT_CHECK(cnrtKernelParamsBufferAddParam(params, &din, sizeof(half *)));
  CNRT_CHECK(cnrtKernelParamsBufferAddParam(params, &factor, sizeof(int)));
  CNRT_CHECK(cnrtKernelParamsBufferAddParam(params, &bias, sizeof(float)));
  CNRT_CHECK(cnrtKernelParamsBufferAddParam(params, &len, sizeof(int)));
  cnrtDim3_t dim = {1, 1, 1};
  CNRT_CHECK(cnrtInvokeKernel_V2((void *)&scale_kernel, dim, params, CNRT_FUNC_TYPE_BLOCK, q));
  CNRT_CHECK(cnrtSyncQueue(q));
  cnrtKernelInitParam_t init;
  CNRT_CHECK(cnrtCreateKernelInitParam(&init));
  CNRT_CHECK(cnrtInitKernelMemory((const void *)scale_kernel, init));
  CNRT_CHECK(cnrtInvokeKernel_V3((void *)&scale_kernel, init, dim, params, CNRT_FUNC_TYPE_BLOCK, q, NULL));
  CNRT_CHECK(cnrtSyncQueue(q));
  CNRT_CHECK(cnrtMemcpy(h, dout, sizeof(h), CNRT_MEM_TRANS_DIR_DEV2HOST));
  float f5;
  CNRT_CHECK(cnrtConvertHalfToFloat(&f5, h[5]));
  cnrtKernelParamsBuffer_t wrong;
  CNRT_CHECK(cnrtGetKernelParamsBuffer(&wrong));
  CNRT_CHECK(cnrtKernelParamsBufferAddParam(wrong, &dout, sizeof(half *)));
  CNRT_CHECK(cnrtKernelParamsBufferAddParam(wrong, &din, sizeof(half *)));
  CNRT_CHECK(cnrtKernelParamsBufferAddParam(wrong, &factor, sizeof(short)));
  CNRT_CHECK(cnrtKernelParamsBufferAddParam(wrong, &bias, sizeof(float)));
  CNRT_CHECK(cnrtKernelParamsBufferAddParam(wrong, &len, sizeof(int)));
  cnrtRet_t bad = cnrtInvokeKernel_V2((void *)&scale_kernel, dim, wrong, CNRT_FUNC_TYPE_BLOCK, q);
  cnrtRet_t unknown = cnrtInvokeKernel_V2((void *)&main, dim, params, CNRT_FUNC_TYPE_BLOCK, q);
  printf("%g %d %d\n", f5, bad != CNRT_RET_SUCCESS, unknown != CNRT_RET_SUCCESS);
  CNRT_CHECK(cnrtDestroyKernelParamsBuffer(params));
  CNRT_CHECK(cnrtDestroyKernelInitParamAndMemory(init));
  cnrtDestroy();
  return 0;
}
'''


def test_mlu270_invoke_kernel_v2_v3_with_an_extern_c_host_file(tmp_path):
    # MLU270-era layout: the kernel object from `cncc -c --bang-mlu-arch=MLU270`, the host file built apart and
    # declaring the kernel extern "C"; arguments through cnrtKernelParamsBuffer, each landing in its own type
    (tmp_path / "k.mlu").write_text(INVOKE_KERNEL_MLU)
    (tmp_path / "host.cpp").write_text(INVOKE_KERNEL_HOST)
    assert cncc("-c", "--bang-mlu-arch=MLU270", tmp_path / "k.mlu", "-o", tmp_path / "k.o").returncode == 0
    proc = cncc("-c", tmp_path / "host.cpp", "-o", tmp_path / "host.o")
    assert proc.returncode == 0, proc.stderr
    proc = cncc(tmp_path / "k.o", tmp_path / "host.o", "-o", tmp_path / "app", "-lcnrt")
    assert proc.returncode == 0, proc.stderr
    out = run(tmp_path / "app")
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["15.5", "1", "1"], out.stdout + out.stderr  # 5 * 3 + 0.5
    assert "parameter 3 of kernel scale_kernel is 4 bytes but cnrtKernelParamsBufferAddParam gave 2" in out.stderr
    assert "is not a kernel of a .mlu file built by cncc-emu" in out.stderr


ASM_KERNEL = """#include <bang.h>
__mlu_func__ void unused_helper(int *x) {  // never called: real cncc would assemble it, we never emit it
  __asm__ volatile("findlast1.gpr.b32 %[dst], %[src];\\n\\t" : [dst] "+&r"(*x) : [src] "r"(*x));
}
__mlu_global__ void k(float *out) {
  __nram__ float buf[64];
  __memcpy_async(buf, out, 256, GDRAM2NRAM);
  __asm__ volatile("sync;\\n\\t");
  buf[0] += 1;  // after the barrier: no async hazard
  asm volatile("sync;");
  __memcpy(out, buf, 256, NRAM2GDRAM);
}
int main() {
  float *d; cnrtMalloc((void **)&d, 256); cnrtMemset(d, 0, 256); cnrtQueue_t q; cnrtQueueCreate(&q);
  k<<<cnrtDim3_t{1, 1, 1}, cnrtFuncTypeBlock, q>>>(d);
  float h[64]; cnrtMemcpy(h, d, 256, cnrtMemcpyDevToHost);
  printf("%g\\n", h[0]);
  return cnrtQueueSync(q) == cnrtSuccess ? 0 : 7;
}
"""


def test_inline_asm_sync_is_the_barrier(build, tmp_path):
    src = tmp_path / "asm_sync.mlu"
    src.write_text(ASM_KERNEL)
    proc = run(build(src))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "1" and "async-hazard" not in proc.stderr


def test_other_inline_asm_is_a_compile_error_at_its_line(tmp_path):
    src = tmp_path / "asm_other.mlu"
    src.write_text("#include <bang.h>\n__mlu_global__ void k(float *out) {\n  int x = 3;\n"
                   '  __asm__ volatile("findlast1.gpr.b32 %[dst], %[src];\\n\\t" : [dst] "+&r"(x) : [src] "r"(x));\n'
                   "  out[0] = x;\n}\n")
    proc = cncc("-c", src, "-o", tmp_path / "asm_other.o")
    assert proc.returncode != 0
    assert "asm_other.mlu:4:" in proc.stderr
    assert "inline assembly is not supported by the emulator: 'findlast1.gpr.b32" in proc.stderr


def _code(obj) -> tuple[str, str]:
    """An object's symbols and disassembly (its debug info names the driver's temporary folder)."""
    symbols = subprocess.run(["nm", str(obj)], capture_output=True, text=True, check=True).stdout
    code = subprocess.run(["objdump", "-d", "--no-show-raw-insn", str(obj)], capture_output=True, text=True,
                          check=True).stdout
    return symbols, code.split("\n", 2)[2]  # past the line naming the file


def test_one_driver_compiles_the_runs_object_and_the_device_modules_as_two_would(tmp_path):
    """bang_harness/build.py's step per .mlu (issue 41): `--emu-device-module-also` gives the object `-c` gives and
    the one `--emu-device-module -c` gives, from one preprocessing."""
    src = PROGRAMS / "features.mlu"
    proc = cncc("-c", "-fPIC", "-O2", f"--emu-device-module-also={tmp_path / 'pair_device.o'}", src, "-o",
                tmp_path / "pair_run.o")
    assert proc.returncode == 0, proc.stderr
    assert cncc("-c", "-fPIC", "-O2", src, "-o", tmp_path / "run.o").returncode == 0
    assert cncc("--emu-device-module", "-c", "-fPIC", "-O2", src, "-o", tmp_path / "device.o").returncode == 0
    assert _code(tmp_path / "pair_run.o") == _code(tmp_path / "run.o")
    assert _code(tmp_path / "pair_device.o") == _code(tmp_path / "device.o")
    assert _code(tmp_path / "run.o") != _code(tmp_path / "device.o")


def test_the_pair_stops_at_the_first_objects_error_and_names_the_device_modules_refusal(tmp_path):
    src = tmp_path / "k.mlu"
    device = tmp_path / "device.o"
    src.write_text("#include <bang.h>\n__mlu_global__ void k(float *y) { y[0] = undeclared; }\n")
    proc = cncc("-c", "-fPIC", f"--emu-device-module-also={device}", src, "-o", tmp_path / "k.o")
    assert proc.returncode != 0 and proc.stderr.count("undeclared") >= 1 and not device.exists()
    # the two objects are compiled side by side, the error is said once: as a plain -c says it
    alone = cncc("-c", "-fPIC", src, "-o", tmp_path / "alone.o")
    assert alone.returncode != 0 and proc.stderr.count("error:") == alone.stderr.count("error:") >= 1, proc.stderr
    # what only the device module refuses: the run's object is made, the step fails at the refusal
    src.write_text("#include <bang.h>\n__mlu_func__ void *f() { return __builtin_frame_address(0); }\n"
                   "__mlu_global__ void k(float *y) { y[0] = f() != 0; }\n")
    proc = cncc("-c", "-fPIC", f"--emu-device-module-also={device}", src, "-o", tmp_path / "k.o")
    assert proc.returncode != 0 and "__builtin_frame_address" in proc.stderr, proc.stderr
    assert (tmp_path / "k.o").exists() and not device.exists()
    assert cncc("--emu-device-module-also=x.o", src, "-o", tmp_path / "exe").returncode != 0  # -c only
