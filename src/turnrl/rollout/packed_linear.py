"""Linear layers of a CPU rollout copy with their weights laid out once for oneDNN.

A decode step multiplies a few rows (the batch) by every weight matrix. `F.linear` hands each
product to the BLAS with the weight as stored, so every call re-blocks the weight for the vector
unit; at 16 rows that costs as much as the arithmetic. oneDNN can block a weight once
(`mkldnn._reorder_linear_weight`) and reuse it at every call: on the 2-core AVX512-BF16 machine a
bfloat16 16 x 576 x 1536 product went from 239 to 341 GFLOP/s, the output head from 135 to 250
(`python benchmarks/decode_parts.py --threads 2`).
The result is bit-for-bit `F.linear`'s (tested), so this changes speed, not numbers.

Only for weights that no optimizer moves: the rollout copy (`rollout.dtype=bfloat16` on a CPU with
oneDNN's bf16 support), whose weights change only at `RolloutCopy.refresh`, which lays them out
again, and the frozen model `turnrl eval` scores (`eval.pack_weights`, in float32 too: oneDNN's
float32 product sums in another order than the BLAS, so the numbers agree to rounding, not bit for
bit).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def can_pack(module: torch.nn.Module, dtype: torch.dtype) -> bool:
    """True where oneDNN can run `module`'s linear layers from packed `dtype` weights: bfloat16 where
    the CPU has oneDNN's bfloat16 support, float32 on any CPU oneDNN runs on."""
    device = next(module.parameters()).device
    mkldnn = torch.ops.mkldnn
    supported = dtype == torch.float32 or (
        dtype == torch.bfloat16 and bool(mkldnn._is_mkldnn_bf16_supported())
    )
    return (
        device.type == "cpu"
        and supported
        and torch.backends.mkldnn.is_available()
        and hasattr(mkldnn, "_reorder_linear_weight")
        and hasattr(mkldnn, "_linear_pointwise")
    )


class PackedLinear(torch.nn.Linear):
    """An `nn.Linear` whose forward reads `packed`, a oneDNN layout of its weight; `weight` stays
    the parameter (state dict, tied embeddings, refresh) and `pack()` lays it out again."""

    packed: torch.Tensor
    rows_hint: int

    def pack(self) -> None:
        self.packed = torch.ops.mkldnn._reorder_linear_weight(self.weight.detach(), self.rows_hint)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # torch.compile lowers this op only for weights frozen into the graph, which a refreshed
        # copy cannot be: compiled steps (`rollout.compile`) take the plain product
        if torch.compiler.is_compiling() or x.dtype != self.packed.dtype:
            return F.linear(x, self.weight, self.bias)
        return torch.ops.mkldnn._linear_pointwise(x, self.packed, self.bias, "none", [], "")


def pack_linears(module: torch.nn.Module, rows_hint: int) -> list[PackedLinear]:
    """Turn every `nn.Linear` under `module` into a `PackedLinear` (in place, weights shared) and
    pack it; `rows_hint` is the batch oneDNN tunes the layout for (any row count works)."""
    packed = []
    for sub in module.modules():
        if type(sub) is torch.nn.Linear:
            sub.__class__ = PackedLinear
            assert isinstance(sub, PackedLinear)
            sub.rows_hint = rows_hint
            sub.pack()
            packed.append(sub)
    return packed
