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
    assert ('::bang_emu::launch_cfg("ns::kern<float,2>", "k.mlu", 3, dim,  CNRT_FUNC_TYPE_BLOCK,  q, '
            '[](auto &...__bang_emu_a) { ns::kern<float, 2>\n     (__bang_emu_a...); }, a,\n') in res.text
    assert '::bang_emu::launch_cfg2("k2", "k.mlu", 6, d,  t, [](auto &...__bang_emu_a) { k2(__bang_emu_a...); })' in res.text
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
