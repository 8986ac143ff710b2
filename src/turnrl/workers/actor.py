"""The actor: owns the policy model, its optimizer and its rollout engine.

It computes the policy's log-probs, runs the PPO update, and saves/loads its own state.
With LoRA it also serves the reference log-probs (the same model with its adapters off: the
base weights never change, so no second copy of the model is needed).
"""

from __future__ import annotations

import copy
from pathlib import Path

import torch

from turnrl.algorithms.core import agg_denominator, flat_rows, masked_mean
from turnrl.algorithms.kl import kl_loss
from turnrl.algorithms.losses import Aggregation, policy_loss, resolve_policy_loss
from turnrl.algorithms.policy_losses import Clip, LossInputs
from turnrl.batch import Batch
from turnrl.config.schema import ActorConfig, ModelConfig, RefConfig, RolloutConfig
from turnrl.models.logprobs import attach_log_prob_method
from turnrl.models.policy import build_policy
from turnrl.models.precision import compute_dtype
from turnrl.rollout.base import Generation, RolloutEngine, SamplingParams
from turnrl.workers import parallel
from turnrl.workers.engines import build_engine
from turnrl.workers.group import dp
from turnrl.workers.memory import names_key_on_oom
from turnrl.workers.microbatch import trimmed_log_probs
from turnrl.workers.optim import Optimizer, epochs_of_mini_batches
from turnrl.workers.state import load_role, save_role

DIAGNOSTIC_FIELDS = ("responses", "response_mask", "attention_mask", "old_log_probs", "advantages")


class Actor:
    def __init__(
        self,
        cfg: ActorConfig,
        model: ModelConfig,
        rollout: RolloutConfig,
        ref: RefConfig | None = None,
        device: torch.device | str = "cpu",
        seed: int = 1,
        run_dir: Path | None = None,
    ):
        """`run_dir`: where a `server` engine writes synced weights and its child server's log."""
        self.cfg, self.model_cfg, self.rollout_cfg, self.ref_cfg = cfg, model, rollout, ref
        self.device = torch.device(device)
        self.model, self.tokenizer = build_policy(model, self.device, seed)
        params = next(self.model.parameters()).dtype
        attach_log_prob_method(self.model, compute_dtype(model.compute_dtype, params, self.device))
        # one process: the engine samples from this very module, its weights are always current.
        # N ranks: rank 0 samples from a full copy that `sync_weights` refreshes (the sharded model
        # cannot run forwards on one rank alone: each is a collective)
        many = parallel.world_size() > 1
        engine_model = copy.deepcopy(self.model) if many and parallel.rank() == 0 else self.model
        self.model = parallel.shard(
            self.model, self.device.type == "cuda", model.fsdp_offload, ("response_log_probs",)
        )
        self.engine_model = engine_model
        self.engine: RolloutEngine | None = None
        if not many or parallel.rank() == 0:  # only rank 0 samples
            self.engine = build_engine(
                rollout,
                engine_model,
                self.tokenizer,
                run_dir or Path("runs") / "rollout",
                model.path,
                self.full_weights,
                dtype=model.dtype,
                cache_dir=model.cache_dir,
                seed=seed,
            )
        self.temperature = rollout.temperature
        # one prompt pass per group; off with gradient checkpointing, which disables the KV cache
        self.share_prompts = not model.gradient_checkpointing
        self.optim = Optimizer(self.model, cfg.optim, name="actor")
        # the loss table's entry and its parameters (verl's flat keys), and the clip range every mode reads
        self.policy_loss = resolve_policy_loss(cfg.policy_loss_mode, cfg)
        self.clip = Clip(cfg.clip_ratio_low, cfg.clip_ratio_high, cfg.clip_ratio_c)
        self._diagnostics: Batch | None = None
        self._want_diagnostics = False

    def rollout_engine(self) -> RolloutEngine:
        """The engine itself, for a group in this process (a remote group wraps `generate`)."""
        assert self.engine is not None
        return self.engine

    def full_weights(self) -> dict[str, torch.Tensor]:
        """The policy as a plain Hugging Face state dict on the CPU (LoRA merged into the base
        weights), for an engine that holds its own copy of the model."""
        model = self.engine_model
        if not hasattr(model, "merge_adapter"):
            return {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
        model.merge_adapter()  # peft: W + BA in place; undone below, so training sees W again
        try:
            state = model.get_base_model().state_dict()
            return {
                k.replace(".base_layer.", "."): v.detach().cpu().clone()
                for k, v in state.items()
                if ".lora_" not in k
            }
        finally:
            model.unmerge_adapter()

    def generate(
        self,
        prompt_ids: list[list[int]],
        params: SamplingParams,
        max_new_tokens_per_row: list[int] | None = None,
    ) -> Generation | None:
        """Rank 0 samples; the others have nothing to do (their result is dropped)."""
        if self.engine is not None:
            return self.engine.generate(prompt_ids, params, max_new_tokens_per_row)
        return None

    def eos_ids(self) -> set[int]:
        return set(self.engine.eos_ids) if self.engine is not None else set()

    def sync_weights(self, version: int) -> None:
        self._refresh_engine()
        if self.engine is not None:
            self.engine.sync_weights(version)

    def _refresh_engine(self) -> None:
        if parallel.world_size() == 1:
            return
        state = parallel.full_state_dict(self.model, trainable_only=True)  # every rank gathers
        if parallel.rank() == 0:
            parallel.load_full_state_dict(self.engine_model, state)

    def _log_probs(self, mb: Batch, chunk_size: int) -> tuple[torch.Tensor, ...]:
        return trimmed_log_probs(
            self.model, mb, self.device, self.temperature, chunk_size, self.share_prompts
        )

    def _log_prob_passes(
        self, batch: Batch, micro: int, chunk_size: int, budget: int, key: str
    ) -> list[torch.Tensor]:
        """(log_probs, entropy) of a whole batch, in micro-batches of `micro` rows or `budget` tokens."""
        return parallel.map_micro_batches(
            batch, micro, lambda mb: self._log_probs(mb, chunk_size), budget, key
        )

    @dp
    @torch.no_grad()
    @names_key_on_oom(
        "actor's log-prob forward",
        "actor.log_prob_micro_batch_size",
        lambda self: self.cfg.log_prob_micro_batch_size,
        "actor.logprob_chunk_size",
    )
    def compute_log_prob(self, batch: Batch) -> Batch:
        """`log_probs` and `entropys` of the responses at the rollout temperature."""
        self.model.eval()
        cfg = self.cfg
        lp, ent = self._log_prob_passes(
            batch,
            cfg.log_prob_micro_batch_size,
            cfg.logprob_chunk_size,
            cfg.log_prob_max_token_len_per_gpu if cfg.use_dynamic_bsz else 0,
            "actor.log_prob_max_token_len_per_gpu",
        )
        return Batch(tensors={"log_probs": lp.cpu(), "entropys": ent.cpu()})

    @dp
    @torch.no_grad()
    @names_key_on_oom(
        "reference forward (the actor without LoRA adapters)",
        "ref.log_prob_micro_batch_size",
        lambda self: self.ref_cfg.log_prob_micro_batch_size,
        "ref.logprob_chunk_size",
    )
    def compute_ref_log_prob(self, batch: Batch) -> Batch:
        """LoRA only: the start policy's log-probs, i.e. the base model with the adapters off."""
        if not hasattr(self.model, "disable_adapter") or self.ref_cfg is None:
            raise RuntimeError("the actor serves reference log-probs only with LoRA (model.lora_rank > 0)")
        was_training = self.model.training
        self.model.eval()
        ref = self.ref_cfg
        with self.model.disable_adapter():
            lp, _ = self._log_prob_passes(
                batch,
                ref.log_prob_micro_batch_size,
                ref.logprob_chunk_size,
                ref.log_prob_max_token_len_per_gpu if ref.log_prob_use_dynamic_bsz else 0,
                "ref.log_prob_max_token_len_per_gpu",
            )
        self.model.train(was_training)
        return Batch(tensors={"ref_log_prob": lp.cpu()})

    def update(
        self, batch: Batch, step: int, diagnostics: bool = False
    ) -> tuple[dict[str, float], Batch | None]:
        """PPO epochs over shuffled mini-batches of `actor.ppo_mini_batch_size` prompts (times
        `rollout.n` responses); one optimizer step per mini-batch, shuffled by `step`.

        With `diagnostics`, also returns the first micro-batch's per-token ratio, clipping and
        loss (what the step inspector shows), as data.
        """
        self.model.train()
        self._want_diagnostics, self._diagnostics = diagnostics, None
        mini = self.cfg.ppo_mini_batch_size * self.rollout_cfg.n
        metrics = epochs_of_mini_batches(batch.to(self.device), self.cfg.ppo_epochs, mini, step, self._step)
        return metrics, self._diagnostics

    def _keep_diagnostics(self, mb: Batch, log_prob: torch.Tensor, m: dict[str, torch.Tensor]) -> None:
        fields = {k: mb[k] for k in DIAGNOSTIC_FIELDS}
        fields.update(
            log_probs=log_prob.detach(),
            ratio=m["ratio"],
            clipped=m["clip_active"],
            dual_clipped=m["dual_active"],
            pg_loss=m["loss_mat"],
        )
        diag = Batch(tensors={k: v.detach().cpu() for k, v in fields.items()}, non_tensors={"uid": mb["uid"]})
        self._diagnostics, self._want_diagnostics = diag, False

    @names_key_on_oom(
        "actor update",
        "actor.ppo_micro_batch_size",
        lambda self: self.cfg.ppo_micro_batch_size,
        "actor.logprob_chunk_size or set model.gradient_checkpointing=true",
    )
    def _step(self, mini: Batch) -> dict[str, float]:
        cfg = self.cfg
        self.optim.zero_grad()
        # the summed denominator makes micro-batch losses add up to the mini-batch loss exactly
        denom = agg_denominator(mini["response_mask"], cfg.loss_agg_mode)
        corrected = "rollout_is_weights" in mini  # TIS / MIS: MIS-dropped tokens leave the denominator too
        pg_denom = (
            max(agg_denominator(mini["rollout_keep_mask"], cfg.loss_agg_mode), 1) if corrected else denom
        )
        width = mini["responses"].shape[1]
        tokens = max(mini["response_mask"].sum().item(), 1.0)
        extra = self.policy_loss.spec.extra_metrics  # e.g. clip_cov's pg_covfrac
        averaged = ("pg_clipfrac", "ppo_kl", "pg_clipfrac_lower", *extra)
        sums = dict.fromkeys(("pg_loss", *averaged, "entropy", "kl_loss"), 0.0)
        finite = True
        budget = cfg.ppo_max_token_len_per_gpu if cfg.use_dynamic_bsz else 0
        key = "actor.ppo_max_token_len_per_gpu"
        # the denominators above are the whole mini-batch's, so leaving out responses whose gradient
        # is exactly 0 changes no other response's share of the loss
        ran, skipped = self._responses_to_run(mini)
        seen = max(ran["response_mask"].sum().item(), 1.0)  # the metrics average over what ran
        micro = parallel.my_micro_batches(ran, cfg.ppo_micro_batch_size, budget, key) if len(ran) else []
        if not micro:
            self.optim.zero_gradients()  # the step a zero loss's backward would have led to
        for mb, real in micro:
            mask = mb["response_mask"]
            loss, pg, m, entropy, kl = self._micro_loss(mb, real, corrected, pg_denom, denom, width, tokens)
            if cfg.use_kl_loss:
                sums["kl_loss"] += kl * real
            if not real:  # a stand-in so this rank joins the others' collectives; adds nothing
                parallel.backward(loss * 0.0)
                continue
            if not torch.isfinite(loss):
                finite = False
                if parallel.world_size() == 1:
                    break
            parallel.backward(loss)  # with N ranks a NaN reaches the gradient norm: every rank skips the step
            share = mask.sum().item() / seen  # token-weighted metric averages
            sums["pg_loss"] += pg.item()
            for k in averaged:
                sums[k] += float(m[k]) * share
            sums["entropy"] += float(masked_mean(entropy.detach(), mask)) * share
        sums = dict(zip(sums, parallel.all_reduce(list(sums.values())), strict=True))
        out = self.optim.step(parallel.all_reduce([float(not finite)], "max")[0] == 0.0)
        if "actor/grad_norm" in out:
            # a mini-batch of flat responses only ran nothing to average: its loss (0) alone
            kept = [k for k in sums if (k != "kl_loss" or cfg.use_kl_loss) and (len(ran) or k == "pg_loss")]
            out.update({f"actor/{k}": sums[k] for k in kept})
            if cfg.use_kl_loss:
                out["actor/kl_coef"] = cfg.kl_loss_coef
            if self.skips_flat:
                out["actor/flat_responses"] = skipped / len(mini)
        return out

    @property
    def skips_flat(self) -> bool:
        """Whether a response whose advantages are all 0 adds exactly 0 to the gradient, so the
        update may leave it out: the loss reads responses apart and nothing but the advantage-weighted
        policy term is in it (`actor.skip_flat_responses`)."""
        cfg = self.cfg
        inert = self.policy_loss.spec.flat_rows_inert and not cfg.use_kl_loss and not cfg.entropy_coeff
        return cfg.skip_flat_responses and inert

    def _responses_to_run(self, mini: Batch) -> tuple[Batch, int]:
        """The mini-batch's responses the update must run, and how many it leaves out. All of them
        when the inspector wants this step's per-token diagnostics (they show the first micro-batch as
        sampled)."""
        if not self.skips_flat or self._want_diagnostics:
            return mini, 0
        flat = flat_rows(mini["advantages"], mini["response_mask"])
        if not bool(flat.any()):
            return mini, 0
        return mini.index((~flat).nonzero().flatten().tolist()), int(flat.sum())

    def _micro_loss(
        self,
        mb: Batch,
        real: bool,
        corrected: bool,
        pg_denom: int,
        denom: int,
        width: int,
        tokens: float,
    ) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor], torch.Tensor, float]:
        """One micro-batch's loss (policy, entropy bonus, KL), its policy part, the policy loss's
        metrics, the entropy, and the KL loss's value (0 without `actor.use_kl_loss`)."""
        cfg = self.cfg
        log_prob, entropy = self._log_probs(mb, cfg.logprob_chunk_size)
        mask = mb["response_mask"]
        inputs = LossInputs(
            old_log_prob=mb["old_log_probs"],
            log_prob=log_prob,
            advantages=mb["advantages"],
            mask=mb["rollout_keep_mask"] if corrected else mask,
            clip=self.clip,
        )
        pg, m = policy_loss(
            inputs,
            self.policy_loss,
            Aggregation(cfg.loss_agg_mode, norm_length=width, denominator=pg_denom),
            weights=mb["rollout_is_weights"] if corrected else None,
            per_token=self._want_diagnostics,
        )
        if self._want_diagnostics and real:
            self._keep_diagnostics(mb, log_prob, m)
        loss = pg
        if cfg.entropy_coeff:
            loss = loss - cfg.entropy_coeff * (entropy * mask).sum() / tokens
        if not cfg.use_kl_loss:
            return loss, pg, m, entropy, 0.0
        kl = kl_loss(
            log_prob,
            mb["ref_log_prob"],
            mask,
            cfg.kl_loss_type,
            cfg.loss_agg_mode,
            loss_denominator=denom,
            loss_norm_length=width,
        )
        return loss + cfg.kl_loss_coef * kl, pg, m, entropy, kl.item()

    def save(self, directory: Path) -> None:
        """Trainable weights, optimizer + schedule, RNG streams (loads on any number of ranks)."""
        info = {"role": "actor", "model": self.model_cfg.path, "lora_rank": self.model_cfg.lora_rank}
        save_role(directory, info, self.model, self.optim)

    def load(self, directory: Path) -> None:
        load_role(directory, "actor", self.model, self.optim)
        self._refresh_engine()

    def close(self) -> None:
        if self.engine is not None:
            self.engine.close()  # a server engine stops its child server
