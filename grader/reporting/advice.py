"""The one advice registry: finding kind -> title, advice, action, snippet (and the short hint beside a case).

Kinds come from three places, marked by `origin`: the emulator's diagnostics (exactly the kinds the runtime
emits, hyphens as underscores; tests/reporting/test_advice.py scans the runtime sources), patterns in the
outputs (hints.py), and verdicts without cases. The text here is generic; an assignment replaces any field
for any kind in its assignment.toml `[feedback.advice.<kind>]`, so a new assignment needs no Python.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Literal

from grader.i18n import N_, _
from grader.results import AssignmentFacts, FeedbackSpec

Origin = Literal["emulator", "output", "verdict", "speed", "compile"]


@dataclass(frozen=True)
class Advice:
    origin: Origin
    title: str  # what is wrong
    advice: str  # how to fix it
    action: str  # the fix as a one-line imperative, for "What to do next"
    snippet: str | None = None  # code showing the fix
    case_hint: str | None = None  # one line beside a failing case; default: the title


SNIPPET_TASKS = """\
int per_task = rows / taskDim, extra = rows % taskDim;
int start = taskId * per_task + min(taskId, extra);
int count = per_task + (taskId < extra ? 1 : 0);
// host: cnrtDim3_t dim = {16, 1, 1};  kernel<<<dim, CNRT_FUNC_TYPE_BLOCK, queue>>>(...)"""

SNIPPET_ASYNC = """\
__memcpy_async(buf[0], src, bytes, GDRAM2NRAM);           // prologue
for (int i = 0; i < n_tiles; ++i) {
  __sync_io();                                            // tile i is in buf[i % 2]
  if (i + 1 < n_tiles) __memcpy_async(buf[(i + 1) % 2], src + next, bytes, GDRAM2NRAM);
  compute(buf[i % 2]);                                    // overlaps the next load
  __memcpy_async(dst + cur, buf[i % 2], bytes, NRAM2GDRAM);
}
__sync_io();"""

_SNIPPET_NRAM = """\
__nram__ float buf[CHUNK];                 // on-chip copy of one chunk
__memcpy(buf, x + start, len * sizeof(float), GDRAM2NRAM);
/* compute on buf[0..len) */
__memcpy(y + start, buf, len * sizeof(float), NRAM2GDRAM);"""

_SNIPPET_SRAM = """\
// launch {4, clusters, 1} with CNRT_FUNC_TYPE_UNION1; the memory core loads once per cluster
__mlu_shared__ float right_sram[N * K];
if (__is_mpu()) { __memcpy(right_sram, right, bytes, GDRAM2SRAM); }
__sync_cluster();                       // every core, and the memory core, reaches this
if (__is_ipu()) { __memcpy(right_wram, right_sram, bytes, SRAM2WRAM); /* ... */ }"""

_SNIPPET_REMAINDER = """\
for (int start = 0; start < n; start += CHUNK) {
  int len = n - start < CHUNK ? n - start : CHUNK;   // the last piece is shorter
  __memcpy(buf, x + start, len * sizeof(float), GDRAM2NRAM);
  /* compute on buf[0..len) */
  __memcpy(y + start, buf, len * sizeof(float), NRAM2GDRAM);
}"""

_SNIPPET_DTYPE_DISPATCH = """\
// binding: choose the kernel by the tensor's dtype instead of casting everything to float*
if (x.scalar_type() == at::kHalf) {
  kernel_entry(queue, reinterpret_cast<half *>(y_ptr), reinterpret_cast<half *>(x_ptr), n);
} else {
  kernel_entry(queue, reinterpret_cast<float *>(y_ptr), reinterpret_cast<float *>(x_ptr), n);
}
// .mlu: instantiate the template for both types
template void kernel_entry(cnrtQueue_t, float *, float *, int);
template void kernel_entry(cnrtQueue_t, half *, half *, int);"""

_BARRIERS = N_("Not every core reached the same __sync_cluster()/__sync_all(). In a UNION kernel the memory core "
               "(coreId 0x80) runs the kernel too: if it returns early, no core may call a cluster barrier after "
               "that point. Make every participant execute the same sequence of barriers.")

def _compile(advice: str) -> Advice:
    return Advice("compile", N_("Compile error"), advice, N_("Fix the compile error"))


REGISTRY: dict[str, Advice] = {
    # -- the emulator's diagnostics (runtime kernel_error / kernel_warning / "bang-emu: error: <kind>:") --
    "gdram_out_of_bounds": Advice(
        "emulator", N_("Access outside a GDRAM buffer"),
        N_("An index or a copy runs past the end (or before the start) of a tensor in GDRAM, usually in the last "
        "task or the last, partial tile. Clamp it: process min(chunk, n - offset) elements there and size that "
        "__memcpy in bytes of the remainder."),
        N_("Clamp the last chunk to the elements that remain"), _SNIPPET_REMAINDER),
    "onchip_out_of_bounds": Advice(
        "emulator", N_("Access outside an on-chip array"),
        N_("An access or a builtin's length runs past the end of an __nram__/__wram__/__mlu_shared__ array. Check "
        "the element count you pass against the array's size; if the data is larger than the array (or than "
        "NRAM itself), process it in tiles."),
        N_("Keep every access inside its on-chip array")),
    "async_hazard": Advice(
        "emulator", N_("Buffer used before its asynchronous copy finished"),
        N_("A buffer filled (or drained) by __memcpy_async was touched before the copy was waited for. Put "
        "__sync_io() (or __sync()) between issuing a copy and using its buffer; in a ping-pong pipeline, wait "
        "after issuing the next load and before computing on the current buffer."),
        N_("Wait with __sync_io() before using an async copy's buffer"), SNIPPET_ASYNC),
    "sram_race": Advice(
        "emulator", N_("A core read SRAM another core wrote, with no barrier between"),
        N_("__mlu_shared__ memory is shared by the cores of a cluster, but nothing orders one core's write and "
        "another core's read except a barrier: the read may run before the write lands. Call __sync_cluster() "
        "after the core that fills SRAM has finished its copy and before the other cores read it (and again "
        "before SRAM is overwritten with the next tile)."),
        N_("Put __sync_cluster() between writing SRAM and other cores reading it")),
    "barrier_deadlock": Advice("emulator", N_("Barrier deadlock"), _BARRIERS, N_("Make every core reach the same barriers")),
    "barrier_timeout": Advice(
        "emulator", N_("A barrier never completed"),
        N_("Some cores waited at __sync_cluster()/__sync_all() for partners that never arrived. Not every core "
           "reached the same __sync_cluster()/__sync_all(). In a UNION kernel the memory core (coreId 0x80) runs "
           "the kernel too: if it returns early, no core may call a cluster barrier after that point. Make every "
           "participant execute the same sequence of barriers."),
        N_("Make every core reach the same barriers")),
    "invalid_launch": Advice(
        "emulator", N_("The launch was refused"),
        N_("The task dimension or function type is not valid: no dim may be 0, a UNIONn launch needs dim.x to be a "
        "multiple of 4*n and at most as many clusters as the device has."),
        N_("Fix the launch dimensions or function type")),
    "invalid_address": Advice(
        "emulator", N_("The kernel used a pointer that is not device memory"),
        N_("Pass the kernel device pointers (the MLU tensor's data pointer), never host pointers or the address of "
        "a host variable."),
        N_("Pass device pointers to the kernel")),
    "arithmetic_exception": Advice(
        "emulator", N_("Arithmetic exception in the kernel"),
        N_("An integer division or remainder by zero stopped the kernel. Look at every `/` and `%` on integers: a "
        "divisor computed from the size (a per-task count, a tile count) is 0 for small inputs; guard it or "
        "compute the split so the divisor is never 0."),
        N_("Guard every integer division against a zero divisor")),
    "invalid_argument": Advice(
        "emulator", N_("A builtin rejected its arguments"),
        N_("Read the emulator's message: it names the builtin and the argument. Counts must be positive and meet "
        "the builtin's alignment rules."),
        N_("Fix the builtin's arguments")),
    "invalid_memcpy_direction": Advice(
        "emulator", N_("The copy direction does not match the pointers"),
        N_("The direction constant must match where source and destination live, e.g. GDRAM2NRAM for a GDRAM "
        "source and an __nram__ destination."),
        N_("Use the copy direction that matches the pointers")),
    "invalid_memcpy": Advice(
        "emulator", N_("A cnrtMemcpy does not match device memory"),
        N_("A host-side cnrtMemcpy names a direction whose device side is not device memory, or copies past the "
        "end of the device buffer. Use CNRT_MEM_TRANS_DIR_HOST2DEV into a cnrtMalloc'd buffer, DEV2HOST back, "
        "and the tensor's size in bytes."),
        N_("Fix the cnrtMemcpy direction and byte count")),
    "kernel_exception": Advice(
        "emulator", N_("The kernel threw a C++ exception"),
        N_("Something in the kernel code threw (for instance std::vector::at out of range); kernels should not use "
        "exceptions or host containers."),
        N_("Remove what throws inside the kernel")),
    "mpu_onchip_op": Advice(
        "emulator", N_("On-chip work issued on the memory core"),
        N_("In UNION launches the memory core runs the kernel too but has no NRAM/WRAM: guard compute and NRAM "
        "copies with if (__is_ipu()) (or return early on __is_mpu() before any barrier-free part)."),
        N_("Guard on-chip work with __is_ipu()")),
    "wram_scalar_access": Advice(
        "emulator", N_("Scalar access to WRAM"),
        N_("Scalar code cannot read or write WRAM on real hardware. Fill WRAM with __memcpy(..., GDRAM2WRAM or "
        "NRAM2WRAM) and use it only as the right operand of __bang_matmul."),
        N_("Touch WRAM only through __memcpy and __bang_matmul")),
    "outside_kernel": Advice(
        "emulator", N_("A BANG builtin ran outside a kernel"),
        N_("A __bang_* or __memcpy builtin was called from host code. Builtins work only inside a __mlu_global__ "
        "kernel (or a __mlu_func__ it calls): launch the kernel with <<<dim, func_type, queue>>> and do the "
        "work there."),
        N_("Call BANG builtins only inside the kernel")),
    "host_access": Advice(
        "emulator", N_("Host code touched device memory"),
        N_("Host code read or wrote memory on the device (a cnrtMalloc'd buffer or an MLU tensor's data pointer). "
        "On a real MLU the host cannot dereference a device pointer: move data with cnrtMemcpy (or the tensor's "
        ".cpu()/.to()) and compute in the kernel."),
        N_("Move data with cnrtMemcpy, never through a device pointer on the host")),
    "kernel_store_outside_device": Advice(
        "emulator", N_("Kernel code wrote outside device memory"),
        N_("When the grader replays your kernels, a store of kernel code landed outside every device buffer, "
        "on-chip array and the kernel's own locals (or on a stack frame's return address). A kernel can only "
        "write device memory: check the pointer arithmetic, and pass device pointers, never host addresses."),
        N_("Write only device memory from kernels")),
    "kernel_load_outside_device": Advice(
        "emulator", N_("Kernel code read outside device memory"),
        N_("When the grader replays your kernels, a load of kernel code read memory outside every device buffer, "
        "on-chip array, the kernel's own locals and its constants (the emulator's own state, host memory, a stray "
        "pointer). A kernel can only read device memory and its own data: check the pointer arithmetic, and pass "
        "device pointers, never host addresses."),
        N_("Read only device memory and your own data from kernels")),
    "forbidden_call": Advice(
        "emulator", N_("Kernel code called a host function"),
        N_("Kernel code called a function that device code cannot call (libc, a host helper, an allocation, "
        "printf with %n). On the MLU a kernel calls only device functions (__mlu_func__) and builtins: move the "
        "host work out of the kernel."),
        N_("Call only device functions and builtins from kernels")),
    # the replay's WebAssembly engine (bang_emu runtime/wasm_host.cpp; opt-in): its kernel errors
    "wasm_trap": Advice(
        "emulator", N_("The kernel trapped in the grader's replay"),
        N_("When the grader replayed your kernels (compiled to WebAssembly, a separate build of the same .mlu), "
        "they stopped on an instruction that has no result: an access past every buffer, an integer division by "
        "zero or overflow, a stack too deep. Run the failing case on its own and check the indices and divisors "
        "the message points to; `long` is 32-bit in that build, so keep element offsets in `int64_t` where they "
        "can exceed 2^31."),
        N_("Check the indices and divisors of the failing case")),
    "wasm_kernel": Advice(
        "emulator", N_("The grader's replay stopped your kernel"),
        N_("When the grader replayed your kernels, a builtin or a launch argument was refused: the message names "
        "which (an operand outside the kernel's memory, a pointer argument that is not inside a device buffer). "
        "Pass kernels only pointers into device memory and keep builtins' operands inside their buffers."),
        N_("Keep builtins' operands and pointer arguments inside device buffers")),
    # -- patterns in the outputs (hints.py) --
    "unwritten_output": Advice(
        "output", N_("Part of the output is never written"),
        N_("A fraction of the output keeps the poison the grader filled it with, so some tasks write the wrong "
        "range or none. Offset each task by taskId * per_task (not by the NRAM chunk size), cover all taskDim "
        "tasks, and write the final N % taskDim elements."),
        N_("Give every task its own output range, remainder included"), SNIPPET_TASKS,
        case_hint=N_("some outputs never written: check task offsets and the remainder")),
    "nothing_written": Advice(
        "output", N_("Part of the output is never written"),
        N_("Nothing reached the output. Copy the results back with __memcpy(dst_gdram, src_nram, bytes, NRAM2GDRAM) "
        "and make sure the host passes the output tensor's device pointer to the kernel."),
        N_("Copy the results back to GDRAM"), SNIPPET_TASKS),
    "nan_output": Advice(
        "output", N_("NaN or Inf in the output"),
        N_("NaN usually comes from memory read before anything wrote it (the grader poisons buffers with NaN): load "
        "every NRAM tile before computing on it, zero accumulators with __bang_write_zero, and do not compute "
        "past the loaded length."),
        N_("Initialise on-chip buffers before computing on them"),
        case_hint=N_("NaN/Inf where the reference is finite: uninitialised NRAM or a read past loaded data")),
    "zero_output": Advice(
        "output", N_("Zeros instead of results"),
        N_("The output buffer was written before the result was computed, or from the wrong buffer: copy NRAM2GDRAM "
        "after the compute step and from the buffer the builtin wrote."),
        N_("Copy the results back after computing them"),
        case_hint=N_("zeros where values were expected: results not copied back (NRAM2GDRAM) or copied too early")),
    "precision": Advice(
        "output", N_("Results are close but outside the tolerance"),
        N_("Compute in fp32 and keep the operations of one result in the reference's order; an approximation "
        "(a builtin, a series) must meet the tolerance over the whole input range."),
        N_("Tighten the numerics: compute in fp32"),
        case_hint=N_("close, but outside the tolerance: accumulate in fp32, check the approximation")),
    "wrong_values": Advice(
        "output", N_("Wrong values"),
        N_("Check the indexing: each output element must be computed from the input elements at the same row-major "
        "positions, with the strides of the shapes in the signature."),
        N_("Check the indexing against the row-major layout"),
        case_hint=N_("wrong values: check indexing (row-major strides) and the operand layout")),
    "builtin_tolerance": Advice(
        "output", N_("Within the builtin's documented error: not your code"),
        N_("Every element checked is as close to the float64 reference as the builtins are documented to be "
        "(__bang_active_sigmoid returns 0 below x = -7.75 and 1 above 7.75 and is within 1% elsewhere; fp16 keeps "
        "11 bits; fp32 sums depend on their order), yet the case failed: the grader's tolerance did that, not your "
        "kernel. Tell your instructor, quoting the case and the seed digest at the top of this report."),
        N_("Nothing to change in your code for these cases: report them to your instructor"),
        case_hint=N_("within the builtin's documented error: the tolerance failed it, not your code")),
    "tail_only": Advice(
        "output", N_("Only tail shapes fail"),
        N_("Your main loop is right but the remainder is lost. When the size is not a multiple of your chunk (or of "
        "taskDim), process the last, shorter piece too: loop `for (start = 0; start < n; start += chunk)` with "
        "`len = min(chunk, n - start)`, and give the first n % taskDim tasks one extra element (or row) each."),
        N_("Handle the remainder when a size is not a multiple of your chunk"), _SNIPPET_REMAINDER),
    "fp16_only": Advice(
        "output", N_("Only fp16 cases fail"),
        N_("Your fp32 path is right; the half one is not. Check that the binding dispatches on the dtype (a `half` "
        "instantiation for float16 tensors), that every byte count uses `sizeof(T)` (2 for half), and that the "
        "NRAM tile sizes are counted in elements of T."),
        N_("Fix the half path: dispatch on the dtype and size copies with sizeof(T)"), _SNIPPET_DTYPE_DISPATCH),
    "fp16_float_pointers": Advice(
        "output", N_("Half tensors go through float pointers"),
        N_("Your fp32 kernel is right, but there is no half path: the binding hands every tensor to the kernel as "
        "`float*` ({cast}) and nothing looks at the dtype, so a float16 tensor of n elements is read as n floats, "
        "twice its size (the emulator reports the read past its end). Dispatch on the dtype: "
        "`if (x.scalar_type() == at::kHalf)` call a `half` instantiation of your kernel "
        "(`template void entry(cnrtQueue_t, half *, half *, int);`), else the `float` one, and size every copy "
        "with `sizeof(T)`. If you only support float32, the fp16 cases cost their own points only."),
        N_("Dispatch on the dtype: give half tensors a half kernel instead of casting them to float*"),
        _SNIPPET_DTYPE_DISPATCH),
    # -- a correct but slow stage (next_step.py decides which from the trace; the text is here) --
    "stage_in_nram": Advice(
        "speed", N_("Every element access goes out to GDRAM"),
        N_("Copy each chunk to NRAM with __memcpy, compute there, and copy the results back."),
        N_("Stage the data in NRAM with __memcpy before computing"), _SNIPPET_NRAM),
    # the assignment names its builtin
    "use_builtin": Advice(
        "speed", N_("Scalar code where a builtin does a whole tile"),
        N_("Replace the scalar loop over on-chip data with the vector or tensor builtin for the operation."),
        N_("Replace the scalar loop with a BANG builtin")),
    "split_over_tasks": Advice(
        "speed", N_("One task on one core"),
        N_("Launch one task per core and give each task its own rows, remainder included."),
        N_("Split the rows over taskDim and launch one task per core"), SNIPPET_TASKS),
    "double_buffer": Advice(
        "speed", N_("The compute units idle while each tile moves"),
        N_("Load the next tile with __memcpy_async while computing on the current one."),
        N_("Double-buffer with __memcpy_async so loads overlap compute"), SNIPPET_ASYNC),
    "sram_staging": Advice(
        "speed", N_("Every task loads the shared operand from GDRAM"),
        N_("Load the operand every task shares into SRAM once per cluster and copy it on chip from there."),
        N_("Stage the shared right matrix in SRAM once per cluster (UNION1 launch)"), _SNIPPET_SRAM),
    "bigger_tiles": Advice(
        "speed", N_("Many small copies"),
        N_("Copy larger tiles: each copy pays a fixed latency, so fewer, bigger copies move the data faster."),
        N_("Use larger tiles so each copy moves more data")),
    # -- compile errors: the first pattern of COMPILE_PATTERNS a compiler message matches names its kind --
    "compile_unknown_builtin": _compile(
        N_("That builtin is unknown: check its spelling and that the file includes <bang.h>."),
    ),
    "compile_undeclared": _compile(
        N_("Declare the name before use (or include the header that declares it); a typo in a variable or "
        "a missing taskId/taskDim-derived variable is the usual cause."),
    ),
    "compile_builtin_arguments": _compile(
        N_("The builtin exists but not with these argument types: check the pointer types (float* into "
        "__nram__/__wram__ arrays), the argument order and the direction constant."),
    ),
    "compile_onchip_too_large": _compile(
        N_("An on-chip array is larger than the memory it lives in; tile the data so each buffer fits."),
    ),
    "compile_undefined_reference": _compile(
        N_("A function is declared but never defined or its name does not match between the .mlu and the "
        '.cpp (check extern "C", the template instantiation and the exact signature).'),
    ),
    "compile_syntax": _compile(
        N_("A syntax error: look at the line shown and the one before it (a missing ';' or bracket)."),
    ),
    "compile_type_mismatch": _compile(
        N_("A type mismatch: check pointer types between host tensors, GDRAM pointers and on-chip arrays."),
    ),
    # -- verdicts without cases --
    "ungradable_layout": Advice(
        "verdict", N_("The submission layout is not gradable"),
        N_("Keep the handout layout: my_ops/mlu/*.mlu, my_ops/cpp/*.cpp, my_ops/ops.py (and grade.toml if you "
        "renamed the module or the entry functions)."),
        N_("Restore the handout's file layout")),
    "not_using_kernel": Advice(
        "verdict", N_("Your kernel never ran"),
        N_("The entry function returned a result without launching a BANG kernel (for instance it computed with "
        "torch on the host). Call the op your extension registers, which launches the kernel with "
        "<<<dim, func_type, queue>>>."),
        N_("Launch your BANG kernel from the entry function")),
    "timeout": Advice(
        "verdict", N_("Time limit exceeded"),
        N_("The run did not finish in time. Look for a loop whose bound never changes (e.g. a step of 0 when "
        "taskDim exceeds the work), a barrier some cores never reach, or a scalar loop run on the large "
        "performance shape."),
        N_("Find the loop or barrier that never finishes")),
    "crash": Advice(
        "verdict", N_("The process crashed"),
        N_("The extension died (a signal or a non-zero exit). Typical causes: dereferencing a host pointer in the "
        "kernel, a wrong byte count in cnrtMemcpy, or using a tensor's data_ptr() after it was freed."),
        N_("Find what crashes the extension")),
    "environment_error": Advice(
        "verdict", N_("This machine cannot grade yet"),
        N_("Nothing of your submission was run: the grader found no sandbox to run it in. The message says which "
        "command sets the machine up."),
        N_("Set up the grading machine, then grade again")),
    "integrity": Advice(
        "verdict", N_("The grader could not confirm the result came from your kernel"),
        N_("What the run reported does not add up: for instance the output was written by host code rather than by "
        "a kernel, the kernels did less work than the output needs, or the launch records were not the "
        "emulator's own. The message lists exactly what did not match. Compute the whole output with your BANG "
        "kernel, launched from the entry function."),
        N_("Compute the output with your kernel, and only with it")),
    "internal_error": Advice(
        "verdict", N_("The grader failed"),
        N_("This is not your fault: the grader itself hit an error. Tell the course staff and quote the submission "
        "hash at the top of this report."),
        N_("Report this run to the course staff")),
    "held_for_review": Advice(
        "verdict", N_("Held for review: the grader's two replays of your kernels disagree"),
        N_("This is not a finding against your code. The grader re-runs your kernels on fresh inputs in a confined "
        "engine (WebAssembly) and decides from that; where that engine would cost you points but the native replay "
        "of the same kernels on the same inputs finds nothing, the call is held until the course staff have looked "
        "at it, and earns nothing until then. A frequent cause is code whose result depends on the size of `long` "
        "or of a pointer (32 bits in the engine, 64 natively; `size_t` too): use `int64_t` where you need 64 bits."),
        N_("Wait for the course staff's review, or use fixed-size integer types and submit again")),
}


# A compiler message's kind: the first pattern it matches, in this order (hints.compile_error_advice).
COMPILE_PATTERNS: dict[str, re.Pattern[str]] = {
    "compile_unknown_builtin": re.compile(
        r"['‘`](__bang_\w+|__memcpy\w*|__sync\w*)['’] was not declared|undeclared identifier ['‘](__bang|__memcpy)"),
    "compile_undeclared": re.compile(r"was not declared in this scope|undeclared identifier"),
    "compile_builtin_arguments": re.compile(r"no matching function for call to ['‘](__bang_\w+|__memcpy\w*)"),
    "compile_onchip_too_large": re.compile(
        r"(?i)(nram|wram|sram).*(exceed|too large|overflow)|(exceed|too large).*(nram|wram|sram)"),
    "compile_undefined_reference": re.compile(r"undefined reference to|undefined symbol"),
    "compile_syntax": re.compile(
        r"expected ['‘][;)}\]]['’]|expected (primary-)?expression|expected unqualified-id"),
    "compile_type_mismatch": re.compile(r"cannot convert|invalid conversion"),
}


def kinds(origin: Origin) -> set[str]:
    return {kind for kind, entry in REGISTRY.items() if entry.origin == origin}


def feedback(facts: AssignmentFacts | None) -> FeedbackSpec:
    """The assignment's [feedback] section as the results document carries it; the defaults without one."""
    return facts.feedback if facts is not None else FeedbackSpec()


def advice_for(kind: str, facts: AssignmentFacts | None = None) -> Advice | None:
    """The registry's entry for a kind with the assignment's own text in place of the generic, if any, in the
    active language (grader.i18n: the registry holds the English msgids)."""
    entry = REGISTRY.get(kind)
    if entry is None:
        return None
    override = feedback(facts).advice.get(kind)
    if override is not None:
        entry = replace(entry, **override.model_dump(exclude_none=True))
    return translated(entry)


def translated(entry: Advice) -> Advice:
    """`entry`'s texts in the active language (the snippet is code and stays as written)."""
    return replace(entry, title=_(entry.title), advice=_(entry.advice), action=_(entry.action),
                   case_hint=_(entry.case_hint) if entry.case_hint else None)
