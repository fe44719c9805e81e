"""Struct kernel arguments on the WebAssembly engine (bang_emu/wasm/records.py, X86Reader in wasm/include/bang.h):
the journal holds a struct's bytes in g++'s x86-64 layout; the wasm build derives that layout from clang for
x86-64 and reads each member at its offset, mapping pointer members into linear memory. The same native journal
replayed by both engines gives byte-identical outputs; a struct whose layout cannot be read is refused by name.
Skipped visibly without the wasm toolchain or wabt (`grade setup --tests` installs both)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from bang_emu.wasm import build, records

from tests.wasm.test_wasm_replay import both_engines, journal_run
from tests.wasm.test_wasm_sites import KERNELS, _need_toolchains

HERE = Path(__file__).resolve().parent
STRUCT_ARGS = HERE / "struct_args_sigmoid.mlu"




def test_a_struct_argument_with_pointers_replays_on_both_engines_byte_for_byte(tmp_path):
    """Tensors (struct_args_sigmoid.mlu) is 96 bytes natively and 56 in wasm32; its buffers are read from their
    x86-64 offsets, its unused slots (0xA5 bytes, a host address) are not followed, and the output, the printed line
    and the work agree with the native replay of the same journal."""
    _need_toolchains()
    b = journal_run(STRUCT_ARGS, tmp_path)
    (site,) = b.wasm.sites
    assert site.endswith("(Tensors,i32)"), site
    n = KERNELS["sigmoid"][2][0]
    line = f"struct args: tag S, tile 2048, 1 input(s), {n} elements, check 123456789abcdef, scale 3\n"
    out, _, wasm = both_engines(b, tmp_path, line)
    assert len(set(out)) > 16  # the kernel wrote a sigmoid, not a constant
    assert wasm["launch"]["work"]["cores_used"] == 4 and wasm["output"]["kernel_written"] == n * 4


def test_the_reader_has_the_journals_x86_64_layout(tmp_path):
    """The generated reader of each struct: the journal's size and each member at clang's x86-64 offset (an array
    of structs through its element's reader)."""
    _need_toolchains()
    build.compile_unit(STRUCT_ARGS, tmp_path / "x.o", [HERE], [build.DEFAULT_ARCH], tmp_path)
    text = (tmp_path / "struct_args_sigmoid.mlu.wasm.ii").read_text()
    tail = text[text.index("/* the x86-64 layout of"):]
    assert "X86Reader<struct Tensors>" in tail and "size = 96;" in tail
    for offset, member in ((0, "o.inputs"), (40, "o.n_inputs"), (48, "o.outs"), (80, "o.meta.tag"),
                           (84, "o.meta.tile"), (88, "o.check")):
        assert f"read_field(p + {offset}, {member}, index);" in tail, (offset, member, tail)
    span = tail[tail.index("/* the x86-64 layout of struct Span"):]
    assert "size = 16;" in span and "read_field(p + 8, o.count, index);" in span


REFUSED = {
    "a bit-field": ("struct Flags { float *p; unsigned ready : 1; };", "Flags",
                    r"struct Flags: member unsigned int ready at x86-64 offset 8: a bit-field"),
    "a union": ("struct Either { union U { float *p; long n; } u; };", "Either",
                r"struct Either: member union Either::U u at x86-64 offset 0: a union"),
    "a base class": ("struct Base { float *p; };\nstruct Derived : Base { int n; };", "Derived",
                     r"struct Derived: member struct Base \(base\) .*a base class"),
    "an anonymous namespace": ("namespace { struct Hidden { float *p; }; }", "Hidden",
                               r"struct \(anonymous namespace\)::Hidden: it has no name"),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_a_struct_whose_layout_cannot_be_read_is_refused_by_name(tmp_path, case):
    _need_toolchains()
    decl, name, message = REFUSED[case]
    src = tmp_path / "refused.mlu"
    src.write_text(textwrap.dedent("""
        #include <bang.h>
        {decl}
        __mlu_global__ void kernel({name} s, float *y) {{ y[0] = 1.0f; }}
        void entry({name} s, float *y) {{
          cnrtDim3_t dim = {{1, 1, 1}};
          kernel<<<dim, cnrtFuncTypeBlock, nullptr>>>(s, y);
        }}
    """).format(decl=decl, name=name))
    with pytest.raises(build.WasmBuildError, match=message + ".*the wasm replay cannot read"):
        build.build([src])


def test_a_dump_is_read_as_a_tree_of_members():
    dump = textwrap.dedent("""
        *** Dumping AST Record Layout
                 0 | struct bang_emu::X86Probe<struct Outer>
                 0 |   struct Outer value
                 0 |     struct Inner in
                 0 |       void * p
                 8 |       long n
                16 |     int[2][3] arr
                   | [sizeof=40, dsize=40, align=8,
                   |  nvsize=40, nvalign=8]
    """)
    (lay,) = records.parse_dump(dump).values()
    assert lay.name == "struct bang_emu::X86Probe<struct Outer>" and lay.size == 40
    leaves = records._leaves("struct Outer", lay.members[0].children, "")
    assert [(x.path, x.offset, x.array) for x in leaves] == [(".in.p", 0, False), (".in.n", 8, False),
                                                             (".arr", 16, True)]


INITIALISED = HERE / "initialised_onchip_sigmoid.mlu"


def test_initialised_onchip_arrays_are_initialised_once_per_core_as_natively(tmp_path):
    """A file-scope and two in-function initialised NRAM arrays (initialised_onchip_sigmoid.mlu): the values are
    copied in once per core, and what the kernel writes into them stays (a counter bumped twice reads 1 then 2), on
    both engines, byte for byte."""
    _need_toolchains()
    b = journal_run(INITIALISED, tmp_path)
    assert "onchip_first_use" in b.wasm.imports
    line = "initialised: first 11.0 second 12.0 bias 0.25 then 1.25 scale 2.0\n"
    out, _, wasm = both_engines(b, tmp_path, line)
    import numpy as np

    y = np.frombuffer(out, dtype=np.float32)
    assert y[0] == 2.0 + 0.25  # (second - first) * scale[0] + bias[0]
    assert wasm["launch"]["work"]["cores_used"] == 4


def test_the_build_knows_the_headers_words_for_a_struct_without_a_reader():
    # build.py runs the layout pass when bang.h's static_assert for a struct argument fires, found by its words
    assert records.NOT_DERIVED in build.HEADER.read_text()
