"""The Tinker service's sampling: a sampler's LoRA adapter applied at every decode step (peft's layers)
against the same adapter merged into a copy of the base (`Backbone.merged`, what the service does).

    python benchmarks/tinker_merged_sampling.py [--model smollm2-135m-instruct] [--rows 64] [--repeats 3]

The cookbook's RL step shape by default: 64 rows (8 prompts x 8 samples) of a 91-token prompt, 24 new
tokens at temperature 1, rank-32 LoRA on every projection and the unembedding (the SDK's defaults).
The two ways alternate, `--repeats` times each; the best of each is printed with their ratio.
"""

from __future__ import annotations

import argparse
import time

import torch

from turnrl.models.loader import load_model
from turnrl.rollout.base import SamplingParams
from turnrl.rollout.hf import HFEngine
from turnrl.tinker.backbone import Backbone
from turnrl.tinker.registry import LoraSpec


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="smollm2-135m-instruct")
    p.add_argument("--rows", type=int, default=64)
    p.add_argument("--prompt-tokens", type=int, default=91)
    p.add_argument("--new-tokens", type=int, default=24)
    p.add_argument("--rank", type=int, default=32)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    torch.manual_seed(0)
    model, tok = load_model(args.model, torch.device("cpu"), seed=0)
    backbone = Backbone(model, tok, args.model, "")
    backbone.add_adapter("sampler", backbone.lora_config(LoraSpec(rank=args.rank)), seed=0)
    with torch.no_grad():  # a trained adapter: lora_B is no longer zero
        for param in backbone.parameters("sampler"):
            param.copy_(torch.randn_like(param) * 0.01)
    prompts = [torch.randint(0, 1000, (args.prompt_tokens,)).tolist() for _ in range(args.rows // 8)]
    params = SamplingParams(max_new_tokens=args.new_tokens, n=8, temperature=1.0)
    start = time.perf_counter()
    merged = backbone.merged("sampler")
    merge_s = time.perf_counter() - start
    engines = {"adapter applied": HFEngine(backbone.model, tok), "merged copy": HFEngine(merged, tok)}
    best = dict.fromkeys(engines, float("inf"))
    for _ in range(args.repeats):
        for name, engine in engines.items():
            with backbone.active("sampler"):  # the peft model samples with the adapter on
                start = time.perf_counter()
                engine.generate(prompts, params)
                best[name] = min(best[name], time.perf_counter() - start)
    for name, seconds in best.items():
        print(f"{name:16s} {seconds:7.2f} s for {args.rows} rows x {args.new_tokens} tokens")
    print(f"merging once     {merge_s:7.2f} s")
    print(f"ratio            {best['adapter applied'] / best['merged copy']:7.2f}x (applied / merged)")


if __name__ == "__main__":
    main()
