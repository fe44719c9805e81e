"""Writes profile.json: the seccomp profile every sandbox container runs under, pinned in the repository so a
daemon upgrade never changes what a grading may do.

Design: allow by default, refuse a fixed list. The sandbox already runs as a non-root uid with every capability
dropped, no network and a read-only root, so what is left to take away is what a cap-less process may still do
and a grading never needs:

- reading or patching another process of the sandbox (ptrace, process_vm_*, pidfd_getfd, kcmp): e.g. the harness
  supervisor's key, or the emulator runtime's tables from a second process;
- kernel interfaces seccomp cannot see into, or frequent kernel bug classes (io_uring_*, bpf, userfaultfd,
  perf_event_open, keyctl);
- namespaces and mounts (unshare, setns, mount and the new mount API; clone with namespace flags; clone3 gets
  ENOSYS so glibc falls back to clone, whose flags can be checked);
- host administration (modules, kexec, reboot, clocks, swap, quotas, accounting).
Rerun after changing the lists: `python sandbox/images/seccomp/make_profile.py`.
"""

from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROFILE = HERE / "profile.json"
SLOT_PROFILE = HERE / "slot-profile.json"

EPERM, ENOSYS = 1, 38
# clone(2) flags that make a namespace: CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET
CLONE_NAMESPACE_FLAGS = (0x00020000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000, 0x40000000)

DENIED = frozenset({
    "ptrace", "process_vm_readv", "process_vm_writev", "process_madvise", "kcmp", "pidfd_getfd",
    "io_uring_setup", "io_uring_enter", "io_uring_register",
    "keyctl", "add_key", "request_key", "bpf", "userfaultfd", "perf_event_open",
    "mount", "umount2", "unshare", "setns", "pivot_root", "chroot", "open_by_handle_at", "name_to_handle_at",
    "move_mount", "open_tree", "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr",
    "fanotify_init", "lookup_dcookie", "quotactl", "acct", "syslog", "vhangup", "reboot",
    "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
    "iopl", "ioperm", "settimeofday", "clock_settime", "clock_adjtime", "adjtimex", "swapon", "swapoff",
    "get_mempolicy", "mbind", "set_mempolicy", "uselib", "ustat", "sysfs", "_sysctl", "nfsservctl",
    "personality",
})


# What a slot container's zygote needs beyond a run sandbox to confine each job itself (bang_harness/slot.py):
# new namespaces (unshare, clone's namespace flags) and the binds and tmpfs mounts of a job. Each job's processes
# carry the run profile stacked on top, so for them these are refused again.
SLOT_ALLOWED = frozenset({"unshare", "mount"})


def make_profile(allowed: frozenset[str] = frozenset()) -> dict:
    """The run profile; with `allowed` (the slot profile) those calls, and clone's namespace flags if "unshare" is
    among them, are not refused."""
    denied = DENIED - allowed
    return {
        "comment": "bang-grader sandbox: allow by default, refuse " + ", ".join(sorted(denied))
                   + ("" if "unshare" in allowed else ", clone with namespace flags")
                   + ", clone3 (ENOSYS); written by sandbox/images/seccomp/make_profile.py",
        "defaultAction": "SCMP_ACT_ALLOW",
        "architectures": ["SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32", "SCMP_ARCH_AARCH64", "SCMP_ARCH_ARM"],
        "syscalls": [
            {"names": sorted(denied), "action": "SCMP_ACT_ERRNO", "errnoRet": EPERM},
            {"names": ["clone3"], "action": "SCMP_ACT_ERRNO", "errnoRet": ENOSYS},
            # one rule per flag: rules are ORed, and (flags & flag) == flag is "this flag is set"
            *({"names": ["clone"], "action": "SCMP_ACT_ERRNO", "errnoRet": EPERM,
               "args": [{"index": 0, "value": flag, "valueTwo": flag, "op": "SCMP_CMP_MASKED_EQ"}]}
              for flag in (() if "unshare" in allowed else CLONE_NAMESPACE_FLAGS)),
        ],
    }


def main() -> None:
    PROFILE.write_text(json.dumps(make_profile(), indent=1) + "\n")
    SLOT_PROFILE.write_text(json.dumps(make_profile(SLOT_ALLOWED), indent=1) + "\n")
    print(PROFILE, SLOT_PROFILE)


if __name__ == "__main__":
    main()
