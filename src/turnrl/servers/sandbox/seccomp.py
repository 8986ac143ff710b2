"""A seccomp filter for sandboxed programs: system calls that a test program never needs, and that
would undo the other layers or widen the kernel's attack surface, fail with EPERM.

The filter is a classic BPF program built here by hand. libseccomp would build it for us, but its
official Python bindings compile C at install time and the ctypes wrapper on PyPI (pyseccomp
0.1.2) was last released in 2021; the program below is five kinds of instruction and is unit
tested instruction by instruction instead. Its layout, each check a compare and a return so that
no jump skips more than a few instructions:

    ld  arch;  jeq AUDIT_ARCH ? go on : KILL      a foreign ABI (i386 through int 0x80) numbers
                                                  its calls differently, so it may not run at all
    ld  nr
    jge X32_SYSCALL_BIT ? EPERM                   x86_64 only: x32 calls are nr | 0x40000000 and
                                                  share AUDIT_ARCH_X86_64, so they would bypass the list
    jeq <denied nr> ? EPERM                       one pair per denied call
    jeq clone3 ? ENOSYS                           its flags sit in memory BPF cannot read; libc then
                                                  falls back to clone, whose flags it can
    jeq clone ? (ld args[0]; jset CLONE_NEW* ? EPERM)   clone may not create namespaces either
    ret ALLOW

Where it is installed: in the program's own process, right before its exec, after everything
that still needs the denied calls (the namespaces, the mounts, the PID namespace's /proc: see
isolation.py and pidns.py).
"""

from __future__ import annotations

import ctypes
import errno
import os
import struct
from collections.abc import Callable
from dataclasses import dataclass

from turnrl.servers.sandbox import nsetup

# include/uapi/linux/bpf_common.h: instruction classes, sizes, modes and operations
BPF_LD, BPF_JMP, BPF_RET = 0x00, 0x05, 0x06
BPF_W, BPF_ABS, BPF_K = 0x00, 0x20, 0x00
BPF_JEQ, BPF_JGE, BPF_JSET = 0x10, 0x30, 0x40
LD_ABS = BPF_LD | BPF_W | BPF_ABS
RET_K = BPF_RET | BPF_K
JEQ_K, JGE_K, JSET_K = BPF_JMP | BPF_JEQ | BPF_K, BPF_JMP | BPF_JGE | BPF_K, BPF_JMP | BPF_JSET | BPF_K
# include/uapi/linux/filter.h: struct sock_filter { __u16 code; __u8 jt; __u8 jf; __u32 k; }
INSTRUCTION = struct.Struct("=HBBI")

# include/uapi/linux/seccomp.h: struct seccomp_data { int nr; __u32 arch; __u64 ip; __u64 args[6]; },
# so nr is at byte 0, arch at 4, and the low half of args[0] at 16 on little-endian machines
NR_OFFSET, ARCH_OFFSET, ARG0_LOW_OFFSET = 0, 4, 16
# include/uapi/linux/seccomp.h: filter return actions and the prctl mode
SECCOMP_RET_KILL_PROCESS = 0x80000000
SECCOMP_RET_ERRNO = 0x00050000
SECCOMP_RET_ALLOW = 0x7FFF0000
SECCOMP_MODE_FILTER = 2
# include/uapi/linux/prctl.h
PR_SET_SECCOMP = 22
PR_SET_NO_NEW_PRIVS = 38
# arch/x86/include/uapi/asm/unistd.h: the x32 ABI marks its call numbers with this bit
X32_SYSCALL_BIT = 0x40000000
# include/uapi/linux/sched.h: CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET.
# CLONE_NEWTIME (0x80) is left out: in clone(2)'s flags that bit belongs to the exit signal.
CLONE_NAMESPACE_FLAGS = (
    0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000
)

# Numbers per architecture: x86_64 from arch/x86/entry/syscalls/syscall_64.tbl, aarch64 from the
# generic table include/uapi/asm-generic/unistd.h (checked against Debian 12's
# /usr/include/x86_64-linux-gnu/asm/unistd_64.h and /usr/include/asm-generic/unistd.h).
# None: the call does not exist there.
DENIED: dict[str, tuple[int | None, int | None]] = {
    # reading, writing or steering other processes (and the init of the run's namespace)
    "ptrace": (101, 117),
    "process_vm_readv": (310, 270),
    "process_vm_writev": (311, 271),
    # changing what the filesystem looks like: would undo the read-only root and private mounts
    "mount": (165, 40),
    "umount2": (166, 39),
    "pivot_root": (155, 41),
    "chroot": (161, 51),
    "fsopen": (430, 430),
    "fsconfig": (431, 431),
    "fsmount": (432, 432),
    "fspick": (433, 433),
    "move_mount": (429, 429),
    "open_tree": (428, 428),
    "mount_setattr": (442, 442),
    # new or other namespaces: a nested user namespace hands out every capability inside it
    "unshare": (272, 97),
    "setns": (308, 268),
    # opening any inode by handle, past the mounts (the "shocker" container escape)
    "open_by_handle_at": (304, 265),
    # the running kernel itself
    "kexec_load": (246, 104),
    "kexec_file_load": (320, 294),
    "init_module": (175, 105),
    "finit_module": (313, 273),
    "delete_module": (176, 106),
    "reboot": (169, 142),
    "swapon": (167, 224),
    "swapoff": (168, 225),
    "acct": (163, 89),
    "quotactl": (179, 60),
    "quotactl_fd": (443, 443),
    "syslog": (103, 116),
    "settimeofday": (164, 170),
    "clock_settime": (227, 112),
    "clock_adjtime": (305, 266),
    "adjtimex": (159, 171),
    "sethostname": (170, 161),
    "setdomainname": (171, 162),
    "vhangup": (153, 58),
    "lookup_dcookie": (212, 18),
    "iopl": (172, None),
    "ioperm": (173, None),
    "uselib": (134, None),
    # large kernel interfaces that many privilege escalations went through
    "bpf": (321, 280),
    "perf_event_open": (298, 241),
    "userfaultfd": (323, 282),
    "keyctl": (250, 219),
    "add_key": (248, 217),
    "request_key": (249, 218),
    "io_uring_setup": (425, 425),
    "io_uring_enter": (426, 426),
    "io_uring_register": (427, 427),
    # execution domains: READ_IMPLIES_EXEC and ADDR_NO_RANDOMIZE weaken memory protections
    "personality": (135, 92),
}
CLONE = (56, 220)
CLONE3 = (435, 435)


@dataclass(frozen=True)
class Arch:
    """One architecture's view of the filter."""

    name: str
    audit: int  # AUDIT_ARCH_* from include/uapi/linux/audit.h: EM_* | __AUDIT_ARCH_64BIT | __AUDIT_ARCH_LE
    column: int  # index into the DENIED tuples
    x32: bool  # whether a second ABI shares this AUDIT_ARCH value with marked numbers

    def number(self, pair: tuple[int | None, int | None]) -> int | None:
        return pair[self.column]

    def denied(self) -> dict[str, int]:
        """name -> number of every denied call this architecture has."""
        return {name: nr for name, pair in DENIED.items() if (nr := self.number(pair)) is not None}


X86_64 = Arch("x86_64", 62 | 0x80000000 | 0x40000000, 0, True)  # EM_X86_64 = 62
AARCH64 = Arch("aarch64", 183 | 0x80000000 | 0x40000000, 1, False)  # EM_AARCH64 = 183
MACHINES = {"x86_64": X86_64, "amd64": X86_64, "aarch64": AARCH64, "arm64": AARCH64}


def arch_for(machine: str) -> Arch | None:
    """The table for `platform.machine()`, or None where there is none (then the layer is off)."""
    return MACHINES.get(machine.lower())


def _stmt(code: int, k: int) -> bytes:
    return INSTRUCTION.pack(code, 0, 0, k)


def _jump(code: int, k: int, jt: int, jf: int) -> bytes:
    return INSTRUCTION.pack(code, jt, jf, k)


def build_filter(arch: Arch) -> bytes:
    """The BPF program (struct sock_filter[] as bytes) for `arch`; layout in the module docstring."""
    eperm = _stmt(RET_K, SECCOMP_RET_ERRNO | errno.EPERM)
    prog = [
        _stmt(LD_ABS, ARCH_OFFSET),
        _jump(JEQ_K, arch.audit, 1, 0),  # ours: skip the kill
        _stmt(RET_K, SECCOMP_RET_KILL_PROCESS),
        _stmt(LD_ABS, NR_OFFSET),
    ]
    if arch.x32:
        prog += [_jump(JGE_K, X32_SYSCALL_BIT, 0, 1), eperm]
    for nr in sorted(arch.denied().values()):
        prog += [_jump(JEQ_K, nr, 0, 1), eperm]  # not this one: skip its return
    clone, clone3 = arch.number(CLONE), arch.number(CLONE3)
    assert clone is not None and clone3 is not None
    prog += [_jump(JEQ_K, clone3, 0, 1), _stmt(RET_K, SECCOMP_RET_ERRNO | errno.ENOSYS)]
    prog += [
        _jump(JEQ_K, clone, 0, 3),  # not clone: straight to ALLOW
        _stmt(LD_ABS, ARG0_LOW_OFFSET),
        _jump(JSET_K, CLONE_NAMESPACE_FLAGS, 0, 1),
        eperm,
        _stmt(RET_K, SECCOMP_RET_ALLOW),
    ]
    return b"".join(prog)


class SockFprog(ctypes.Structure):
    """include/uapi/linux/filter.h: struct sock_fprog { unsigned short len; struct sock_filter *filter; }"""

    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def installer(program: bytes) -> Callable[[], None]:
    """A function for the forked child that installs `program` on itself. The buffers are made
    here, in the server, because the child between fork and exec should only make system calls."""
    buffer = ctypes.create_string_buffer(program, len(program))
    fprog = SockFprog(len(program) // INSTRUCTION.size, ctypes.cast(buffer, ctypes.c_void_p))

    def install() -> None:
        assert nsetup.LIBC is not None
        _ = buffer  # keeps the instructions alive as long as the closure
        nsetup.prctl(PR_SET_NO_NEW_PRIVS, 1)  # the kernel refuses a filter from a process without it
        result = nsetup.LIBC.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0)
        if result != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"seccomp filter: {os.strerror(err)}")

    return install
