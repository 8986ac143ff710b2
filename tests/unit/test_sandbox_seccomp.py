"""The sandbox's seccomp filter: its BPF program instruction by instruction, run through a small
interpreter of the five opcodes it uses, its system call numbers against the kernel headers, and
its installation in a real child (no server)."""

from __future__ import annotations

import ctypes
import errno
import platform
import re
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from turnrl.servers.sandbox import seccomp
from turnrl.servers.sandbox.seccomp import (
    AARCH64,
    DENIED,
    INSTRUCTION,
    JEQ_K,
    JGE_K,
    JSET_K,
    LD_ABS,
    RET_K,
    SECCOMP_RET_ALLOW,
    SECCOMP_RET_ERRNO,
    SECCOMP_RET_KILL_PROCESS,
    X86_64,
    arch_for,
    build_filter,
)

EPERM = SECCOMP_RET_ERRNO | errno.EPERM
ENOSYS = SECCOMP_RET_ERRNO | errno.ENOSYS
AUDIT_ARCH_I386 = 3 | 0x40000000  # EM_386 | __AUDIT_ARCH_LE: a 32-bit program via int 0x80
SIGCHLD, CLONE_NEWUSER, CLONE_VM = 17, 0x10000000, 0x00000100
HOST = arch_for(platform.machine())


def instructions(program: bytes) -> list[tuple[int, int, int, int]]:
    return [INSTRUCTION.unpack_from(program, i) for i in range(0, len(program), INSTRUCTION.size)]


def evaluate(program: bytes, nr: int, arch: int, arg0: int = 0) -> int:
    """What the kernel would return for this call (struct seccomp_data laid out as it does)."""
    data = struct.pack("=iIQ6Q", nr, arch, 0, arg0, 0, 0, 0, 0, 0)
    code = instructions(program)
    acc, pc = 0, 0
    for _ in range(len(code)):  # classic BPF only jumps forward: each instruction runs at most once
        op, jt, jf, k = code[pc]
        if op == LD_ABS:
            acc, pc = struct.unpack_from("=I", data, k)[0], pc + 1
        elif op == RET_K:
            return k
        elif op in (JEQ_K, JGE_K, JSET_K):
            taken = {JEQ_K: acc == k, JGE_K: acc >= k, JSET_K: bool(acc & k)}[op]
            pc += 1 + (jt if taken else jf)
        else:
            raise AssertionError(f"opcode {op:#x} at {pc} is not one the filter uses")
    raise AssertionError("fell off the end of the program")


def test_program_length_is_hand_counted() -> None:
    # x86_64: ld arch, jeq, kill, ld nr (4) + x32 guard (2) + 2 per denied call + clone3 (2) + clone (5)
    assert len(build_filter(X86_64)) // 8 == 4 + 2 + 2 * len(DENIED) + 2 + 5
    # aarch64 has no x32 ABI and no iopl, ioperm or uselib
    assert len(build_filter(AARCH64)) // 8 == 4 + 2 * (len(DENIED) - 3) + 2 + 5


@pytest.mark.parametrize("arch", [X86_64, AARCH64], ids=lambda a: a.name)
def test_every_denied_call_is_compared_and_answered_eperm(arch: seccomp.Arch) -> None:
    code = instructions(build_filter(arch))
    assert code[0] == (LD_ABS, 0, 0, 4) and code[1] == (JEQ_K, 1, 0, arch.audit)  # arch check first
    pairs = {k: code[i + 1] for i, (op, _, _, k) in enumerate(code) if op == JEQ_K and i > 1}
    for name, nr in arch.denied().items():
        assert pairs[nr] == (RET_K, 0, 0, EPERM), name
    assert code[-1] == (RET_K, 0, 0, SECCOMP_RET_ALLOW)


@pytest.mark.parametrize("arch", [X86_64, AARCH64], ids=lambda a: a.name)
def test_evaluated_verdicts(arch: seccomp.Arch) -> None:
    program = build_filter(arch)

    def verdict(name: str, arg0: int = 0) -> int:
        pair = DENIED.get(name) or {"clone": seccomp.CLONE, "clone3": seccomp.CLONE3}[name]
        nr = arch.number(pair)
        assert nr is not None
        return evaluate(program, nr, arch.audit, arg0)

    for name in ("ptrace", "mount", "umount2", "pivot_root", "unshare", "setns", "bpf", "keyctl"):
        assert verdict(name) == EPERM, name
    assert evaluate(program, 0, arch.audit) == SECCOMP_RET_ALLOW  # 0: read on x86_64, io_setup on aarch64
    assert verdict("clone", SIGCHLD) == SECCOMP_RET_ALLOW  # fork
    assert verdict("clone", CLONE_VM | SIGCHLD) == SECCOMP_RET_ALLOW  # threads, vfork
    assert verdict("clone", CLONE_NEWUSER | SIGCHLD) == EPERM  # a namespace by the back door
    assert verdict("clone3") == ENOSYS  # libc then falls back to clone
    assert evaluate(program, 0, AUDIT_ARCH_I386) == SECCOMP_RET_KILL_PROCESS


def test_x32_numbers_cannot_bypass_the_list() -> None:
    ptrace = X86_64.denied()["ptrace"]
    program = build_filter(X86_64)
    assert evaluate(program, ptrace | seccomp.X32_SYSCALL_BIT, X86_64.audit) == EPERM
    assert evaluate(program, 1 | seccomp.X32_SYSCALL_BIT, X86_64.audit) == EPERM  # every x32 call


def test_arch_names() -> None:
    assert arch_for("x86_64") is X86_64 and arch_for("AMD64") is X86_64
    assert arch_for("aarch64") is AARCH64 and arch_for("arm64") is AARCH64
    assert arch_for("riscv64") is None


def _header_numbers(path: Path) -> dict[str, int]:
    found = re.findall(r"#define __NR(?:3264)?_(\w+)\s+(\d+)\b", path.read_text())
    return {name: int(nr) for name, nr in found}


@pytest.mark.parametrize(
    ("arch", "header"),
    [
        (X86_64, "/usr/include/x86_64-linux-gnu/asm/unistd_64.h"),
        (AARCH64, "/usr/include/asm-generic/unistd.h"),  # aarch64 uses the generic table
    ],
    ids=["x86_64", "aarch64"],
)
def test_numbers_match_the_kernel_headers(arch: seccomp.Arch, header: str) -> None:
    if not Path(header).exists():
        pytest.skip(f"{header} not installed (linux-libc-dev)")
    numbers = _header_numbers(Path(header))
    for name, nr in [*arch.denied().items(), ("clone", arch.number(seccomp.CLONE))]:
        assert numbers[name] == nr, name
    assert arch.number(seccomp.CLONE3) == numbers["clone3"]


needs_filter = pytest.mark.skipif(
    HOST is None or not sys.platform.startswith("linux"), reason="seccomp table only for Linux x86_64/aarch64"
)

PROBE = (
    "import ctypes, sys\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "mode = [l.split()[1] for l in open('/proc/self/status') if l.startswith('Seccomp:')][0]\n"
    "result = libc.syscall(int(sys.argv[1]), 0, 0, 0, 0)\n"  # ptrace(PTRACE_TRACEME)
    "print(mode, result, ctypes.get_errno())\n"
)


@needs_filter
def test_installer_in_a_forked_child() -> None:
    assert HOST is not None
    ptrace = str(HOST.denied()["ptrace"])
    out = subprocess.run(
        [sys.executable, "-c", PROBE, ptrace],
        preexec_fn=seccomp.installer(build_filter(HOST)),
        capture_output=True,
        check=True,
    )
    assert out.stdout.split() == [b"2", b"-1", str(errno.EPERM).encode()]


@needs_filter
def test_unfiltered_control_is_allowed() -> None:
    # without the filter the same personality query succeeds: the filter is what says EPERM
    assert HOST is not None
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.syscall(HOST.denied()["personality"], 0xFFFFFFFF) >= 0  # 0xffffffff: only asks
