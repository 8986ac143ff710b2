"""`python -m tests.support.kernel_probe`: prints, as one JSON line, the kernels this process
dispatches to and a digest of each kernel family a training step uses, so two environments can be
compared bit for bit (tests/integration/test_pinned_cpu.py)."""

import ctypes
import hashlib
import json
from pathlib import Path

import torch
import torch.nn.functional as F


def digest(t: torch.Tensor) -> str:
    return hashlib.sha1(t.detach().float().contiguous().numpy().tobytes()).hexdigest()[:12]


def mkl_branch() -> int | None:
    """MKL's conditional-numerical-reproducibility branch in effect (3 = COMPATIBLE), where the
    library exposes it; None where it does not (no MKL, another build)."""
    try:
        lib = ctypes.CDLL(str(Path(torch.__file__).parent / "lib" / "libtorch_cpu.so"))
        get = lib.mkl_serv_cbwr_get
    except (OSError, AttributeError):
        return None
    get.restype, get.argtypes = ctypes.c_int, [ctypes.c_int]
    return int(get(1))  # 1 = MKL_CBWR_BRANCH: ask for the branch


def probe() -> dict:
    torch.manual_seed(0)
    out: dict[str, object] = {}
    # products at the tiny model's and the embedded model's shapes, forward and backward (MKL)
    for m, k, n in [(24, 64, 256), (16, 576, 1536), (64, 576, 49152 // 8), (3, 7, 5)]:
        a = torch.randn(m, k, requires_grad=True)
        w = torch.randn(n, k, requires_grad=True)
        y = F.linear(a, w)
        y.square().sum().backward()
        out[f"linear{m}x{k}x{n}"] = digest(y) + digest(w.grad) + digest(a.grad)
    x = torch.randn(8, 1000)
    # ATen's vector kernels: the log-prob and entropy math, norms, the sampler's cumulative sum
    out["log_softmax"] = digest(F.log_softmax(x, -1))
    out["softmax_entropy"] = digest(-(F.softmax(x, -1) * F.log_softmax(x, -1)).sum(-1))
    out["rms_norm"] = digest(x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6))
    out["silu_exp"] = digest(F.silu(x) + x.exp())
    out["cumsum"] = digest(F.softmax(x, -1).cumsum(-1))
    q, k_, v = (torch.randn(2, 4, 16, 32) for _ in range(3))
    out["attention"] = digest(F.scaled_dot_product_attention(q, k_, v, is_causal=True))
    # oneDNN: a bfloat16 product
    out["linear_bf16"] = digest(F.linear(torch.randn(16, 576).bfloat16(), torch.randn(1536, 576).bfloat16()))
    return {
        "capability": torch.backends.cpu.get_cpu_capability(),
        "mkl_branch": mkl_branch(),
        "threads": torch.get_num_threads(),
        "digests": out,
    }


if __name__ == "__main__":
    print(json.dumps(probe()))
