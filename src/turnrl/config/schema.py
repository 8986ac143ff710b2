"""The typed configuration of a run: one dataclass per section, a docstring per field.

Sizes say whether they count *prompts* or *responses*: with `rollout.n = 4`, a batch of
8 prompts is 32 responses. Getting that wrong is a classic bug (verl #5821), so every size
below names its unit.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from turnrl.config.live_schema import LiveConfig
from turnrl.config.rollout_schema import RolloutConfig
from turnrl.config.rollout_schema import ServerConfig as ServerConfig  # its importers read it here too
from turnrl.config.rules import ranged


@dataclass
class CurriculumConfig:
    window: int = ranged(2, ">= 1")
    """`data.sampler=curriculum`: how many recent groups of a prompt are remembered. A prompt whose last
    `window` groups were all flat (every sample scored the same: all right or all wrong, so zero GRPO
    advantage) is skipped when its turn comes."""
    revisit_prob: float = ranged(0.1, "in [0, 1]", "0 = never, 1 = no skipping")
    """Probability that a skipped prompt is drawn anyway when its turn comes (a seeded coin per slot of
    the epoch's order): a prompt solved or failed once may have changed since. 0 = never, 1 = no skipping."""
    pass_threshold: float = ranged(1.0, "finite")
    """A sample counts as right when its score is >= this: it tells a flat group all right (mastered)
    from all wrong, for `data/curriculum/mastered`; skipping depends on flatness alone."""


@dataclass
class DataConfig:
    train_files: list[str] = field(default_factory=list)
    """Training data: parquet or JSONL files with verl-format rows. Empty = generate `data.task`."""
    val_files: list[str] = field(default_factory=list)
    """Validation data, same format. Empty = generate `data.task`'s validation split."""
    task: str = "addition"
    """Built-in task written into `<run>/data/` when no files are given (see `turnrl.tasks`), or
    `reasoning_gym:<dataset>` (`reasoning_gym:chain_sum`; needs `pip install -e ".[gym]"`)."""
    task_args: dict[str, Any] = field(default_factory=dict)
    """Arguments of `data.task`'s rows, by name (`data.task_args.size=200`); a key the task does not
    take is an error. reasoning-gym tasks take `size`, `val_size`, `format_credit`, `partial_credit`,
    `worked_example` and the dataset's own parameters (docs/data.md). A recipe's `task_args` go with its `task`: an
    override naming another task drops them, so only the `data.task_args.*` overrides apply."""
    train_batch_size: int = ranged(8, ">= 1")
    """Prompts per training step (each is sampled `rollout.n` times)."""
    gen_batch_size: int = ranged(0, ">= 0", "0 = data.train_batch_size")
    """Prompts per generation round (DAPO's `gen_batch_size`), with dynamic sampling
    (`algorithm.filter_groups`): a round samples this many, and the step keeps the first
    `train_batch_size` whose groups vary. Where most groups come out flat, one round of twice the
    prompts replaces two rounds and decodes twice the rows a step. 0 = `train_batch_size`."""
    val_batch_size: int = ranged(64, ">= 1")
    """Prompts per generation call during validation."""
    max_prompt_length: int = ranged(256, ">= 1")
    """Prompts longer than this many tokens are dropped (and counted) at load time."""
    max_response_length: int = ranged(24, ">= 1")
    """Budget of response tokens per sample (the whole multi-turn response in agent mode)."""
    shuffle: bool = True
    """Shuffle the training rows each epoch (seeded by `trainer.seed` and the epoch)."""
    prompt_key: str = "prompt"
    """Row field holding the chat messages `[{role, content}, ...]` (or a plain string)."""
    sampler: str = "plain"
    """`plain` (every prompt once per epoch, in the seeded order) or `curriculum`: skip prompts whose recent
    groups gave GRPO no signal (`data.curriculum`; docs/algorithms.md)."""
    curriculum: CurriculumConfig = field(default_factory=CurriculumConfig)
    """The curriculum sampler's settings (read with `data.sampler=curriculum`)."""


@dataclass
class ModelConfig:
    path: str = "smollm2-135m-instruct"
    """A Hugging Face model directory or Hub id (`Qwen/Qwen2.5-0.5B-Instruct`, through the standard Hugging
    Face cache), a turnrl run or checkpoint directory (`turnrl sft` output, `runs/x/checkpoints/step_20`),
    a `.gguf` file, `smollm2-135m-instruct` (embedded) or `tiny-random`."""
    dtype: str = "auto"
    """`auto` (float32 on CPU, bfloat16 on GPU), `float32`, `bfloat16` or `float16`."""
    compute_dtype: str = "auto"
    """The precision the forward and backward passes compute in (the actor, critic and reference of
    `turnrl train`; `turnrl sft` and `turnrl rm`), with `torch.autocast`, while parameters and
    optimizer state stay in `model.dtype`: `float32` = the parameters' own, exact; `bfloat16` =
    autocast (an error where the device lacks bfloat16 instructions); `auto` = bfloat16 for float32
    parameters where the device multiplies bfloat16 natively (a GPU of compute capability 8.0+, a CPU
    with AVX512-BF16 or AMX), exact elsewhere or under `$TURNRL_EXACT`. Matters only with float32
    parameters (`model.dtype=float32`: float32 master weights, bfloat16 compute)."""
    cache_dir: str = ""
    """Where converted models are cached. Empty = `$TURNRL_CACHE` or `~/.cache/turnrl`."""
    lora_rank: int = ranged(0, ">= 0", "0 = full fine-tuning")
    """LoRA rank; 0 = full fine-tuning."""
    lora_alpha: int = ranged(16, ">= 1")
    """LoRA scaling numerator (scale = alpha / rank)."""
    target_modules: list[str] = field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"])
    """Module names that get LoRA adapters."""
    gradient_checkpointing: bool = False
    """Recompute activations in the backward pass to save memory."""
    fsdp_offload: bool = False
    """With N ranks: keep sharded parameters, gradients and optimizer state in CPU memory (FSDP2 offload)."""


@dataclass
class KLControlConfig:
    type: str = "fixed"
    """`fixed` or `adaptive` (Ziegler et al. 2019: the coefficient tracks `target_kl`)."""
    kl_coef: float = ranged(0.001, ">= 0")
    """Initial (or fixed) KL penalty coefficient beta."""
    target_kl: float = ranged(0.1, "> 0")
    """Adaptive controller: the per-token KL it steers towards."""
    horizon: int = ranged(10000, ">= 1")
    """Adaptive controller: responses over which the coefficient may change by about 20 %."""


@dataclass
class FilterGroupsConfig:
    enable: bool = False
    """DAPO dynamic sampling: drop groups whose scores are all equal, sample more prompts until the batch is full."""
    max_num_gen_batches: int = ranged(4, ">= 1")
    """At most this many generation rounds per step; then train on what was kept (counted in metrics)."""
    refill: str = "fresh"
    """What an extra round samples: `fresh` (DAPO: new prompts from the loader) or `same` (the step's
    prompts whose group scored all equal, again, with another seed: a hard prompt, such as a two-hop
    question no episode solved yet, gets more episodes instead of being replaced by easier ones).
    `same` never adds prompts: a step trains on the groups that varied within the rounds."""


@dataclass
class GiGPOConfig:
    """`algorithm.adv_estimator=gigpo`: GRPO's episode advantage plus a step-level one per model turn,
    comparing the turns that acted from the same observation (Feng et al. 2025, arXiv 2505.10978);
    `adv_estimator=turn_rloo` reads the same two settings (its step term compares a turn with the
    other episodes' turns of the same index, leave-one-out). The maths: turnrl/algorithms/turn_credit.py."""

    step_weight: float = ranged(1.0, ">= 0", "0 = GRPO")
    """omega: the step-level advantage's weight beside the episode's (0 = GRPO; turn_rloo: RLOO)."""
    gamma: float = ranged(0.95, "in (0, 1]")
    """The per-turn discount of a turn's return: turn k of K gets gamma^(K-1-k) * score, plus its own
    and later turns' step rewards (`rollout.multi_turn.step_rewards`) discounted by their distance."""


@dataclass
class RolloutCorrectionConfig:
    """Correct for the gap between the engine's log-probs (`rollout_log_probs`) and the trainer's
    (`old_log_probs`): the ratio rho = pi_old / pi_rollout per token, sequence or geometric mean."""

    mode: str = "none"
    """`none` (metrics only), `tis` (truncated IS: weight min(rho, tis_cap)) or `mis` (masked IS:
    weight rho, tokens or sequences whose rho leaves [mis_low, mis_high] are dropped from the loss)."""
    level: str = "token"
    """`token` (rho per token), `sequence` (product over the response) or `geometric` (its geometric mean)."""
    tis_cap: float = ranged(2.0, "> 0")
    """TIS: importance weights are capped at this value."""
    mis_low: float = ranged(0.5, ">= 0")
    """MIS: lower bound of the kept ratio range."""
    mis_high: float = ranged(2.0, "> 0")
    """MIS: upper bound of the kept ratio range."""
    bypass: str = "auto"
    """Use the rollout's log-probs as the old log-probs and skip the trainer's `old_log_prob` pass:
    `true`, `false`, or `auto`: whenever the engine's log-probs are the step-start policy's, i.e. in a
    synchronous run with `mode=none` that is on-policy (actor.ppo_epochs=1, one mini-batch) or whose
    engine samples from the trainer's own weights (`rollout.engine=hf` on one rank)."""


@dataclass
class AlgorithmConfig:
    adv_estimator: str = "grpo"
    """Advantage estimator: gae, grpo, rloo, reinforce_plus_plus, reinforce_plus_plus_baseline, remax,
    gigpo (GRPO plus turn-level credit for multi-turn episodes: `algorithm.gigpo`), turn_rloo
    (leave-one-out baselines per episode and per turn index, unbiased; multi-turn only), or
    opd (on-policy distillation: the per-token reverse KL to `teacher.model.path`; the task reward is
    then computed and logged but not used for the advantage), or an estimator of your own,
    `path/to/file.py:fn` (`fn(x: AdvantageInputs)` -> advantages, or (advantages, returns))."""
    norm_adv_by_std_in_grpo: bool = True
    """Divide GRPO advantages by the group std; false gives Dr. GRPO."""
    gamma: float = ranged(1.0, "in [0, 1]")
    """Discount factor (GAE, REINFORCE++)."""
    lam: float = ranged(1.0, "in [0, 1]")
    """GAE lambda."""
    use_kl_in_reward: bool = False
    """Subtract beta * KL(policy || reference) from the token rewards (needs the reference)."""
    kl_penalty: str = "k1"
    """KL estimator in the reward: k1 (kl), abs, k2 (mse), k3 (low_var_kl)."""
    kl_ctrl: KLControlConfig = field(default_factory=KLControlConfig)
    """The KL coefficient controller for the reward penalty."""
    filter_groups: FilterGroupsConfig = field(default_factory=FilterGroupsConfig)
    """DAPO dynamic sampling."""
    gigpo: GiGPOConfig = field(default_factory=GiGPOConfig)
    """`adv_estimator=gigpo`'s step-level credit."""
    rollout_correction: RolloutCorrectionConfig = field(default_factory=RolloutCorrectionConfig)
    """Off-policy correction between the rollout engine and the trainer (TIS / MIS / bypass)."""
    distill_coef: float = ranged(0.0, ">= 0", "0 = off")
    """On-policy distillation as a bonus to another estimator: c > 0 adds c * (log p_teacher - log p_student)
    per model token to its advantages (needs `teacher.model.path`); 0 = off. Not with `adv_estimator=opd`."""


@dataclass
class OptimConfig:
    """AdamW with linear warm-up, then a constant or decaying rate: the actor's, the critic's and
    `turnrl sft`'s optimizer."""

    lr: float = ranged(2e-5, "> 0")
    """Peak learning rate (actor default 2e-5 suits the embedded 135M model; larger models want ~1e-6)."""
    lr_warmup_steps: int = ranged(0, ">= 0")
    """Linear warm-up over this many optimizer steps; then `lr_decay`."""
    lr_decay: str = "constant"
    """After the warm-up: `constant`, or `linear` / `cosine` decay to `min_lr_ratio` x `lr` over the
    rest of the run's optimizer steps (`turnrl sft` and `turnrl rm`, whose step count is known before
    the first; an RL run takes `constant`)."""
    min_lr_ratio: float = ranged(0.0, "in [0, 1]")
    """Where `lr_decay` ends, as a fraction of `lr`."""
    weight_decay: float = ranged(0.0, ">= 0")
    """AdamW weight decay."""
    betas: list[float] = ranged(spec="in [0, 1)", default_factory=lambda: [0.9, 0.999])
    """AdamW betas."""
    grad_clip: float = ranged(1.0, ">= 0", "0 = off")
    """Clip the global gradient norm to this value (0 = off)."""


@dataclass
class ActorConfig:
    optim: OptimConfig = field(default_factory=OptimConfig)
    """The actor's optimizer."""
    ppo_mini_batch_size: int = ranged(4, ">= 1")
    """Prompts per optimizer step (times `rollout.n` responses); must divide `data.train_batch_size`."""
    ppo_micro_batch_size: int = ranged(16, ">= 1")
    """Responses per forward/backward pass (gradient accumulation inside a mini-batch)."""
    log_prob_micro_batch_size: int = ranged(32, ">= 1")
    """Responses per forward pass when computing log-probs without gradients."""
    ppo_epochs: int = ranged(1, ">= 1")
    """Passes over each batch."""
    clip_ratio_low: float = ranged(0.2, ">= 0")
    """PPO clip: ratio lower bound is 1 - clip_ratio_low."""
    clip_ratio_high: float = ranged(0.2, ">= 0")
    """PPO clip: ratio upper bound is 1 + clip_ratio_high (DAPO clip-higher sets it above low)."""
    clip_ratio_c: float = ranged(3.0, "> 1", "dual-clip")
    """Dual-clip constant for negative advantages (Ye et al. 2020); must be > 1."""
    loss_agg_mode: str = "token-mean"
    """token-mean, seq-mean-token-sum, seq-mean-token-mean or seq-mean-token-sum-norm."""
    entropy_coeff: float = ranged(0.0, "finite")
    """Entropy bonus coefficient."""
    policy_loss_mode: str = "vanilla"
    """`vanilla` (token-level PPO ratio; clip-higher, DAPO, Yu et al. 2025; dual clip, Ye et al. 2020),
    `gspo` (sequence-level ratio, Zheng et al. 2025, arXiv 2507.18071), `cispo` (clipped detached IS
    weight on log pi, MiniMax 2025, arXiv 2506.13585), `sapo` (soft sigmoid gate, Gao et al. 2025, arXiv
    2511.20347), `gmpo` (geometric mean of token ratios, Zhao et al. 2025, arXiv 2507.20673; reads the
    clip ratios in log space, the paper uses 0.4), `clip_cov` or `kl_cov` (PPO clip plus covariance-based
    entropy control, Cui et al. 2025, arXiv 2505.22617), or a loss of your own, `path/to/file.py:fn`
    (`fn(x: LossInputs)` -> the (B, T) per-token loss). Formulas: docs/algorithms.md."""
    sapo_tau_pos: float = ranged(1.0, "> 0")
    """`sapo`: gate temperature for tokens with advantage > 0 (the paper's 1.0)."""
    sapo_tau_neg: float = ranged(1.05, "> 0")
    """`sapo`: gate temperature for tokens with advantage <= 0 (the paper's 1.05; larger = the gradient
    fades faster off-policy)."""
    clip_cov_ratio: float = ranged(2e-4, "in [0, 1]", "0 = detach nothing")
    """`clip_cov`: fraction of a micro-batch's model tokens whose gradient is detached, drawn at random
    among those with clip_cov_lb <= covariance <= clip_cov_ub (the paper's 2e-4)."""
    clip_cov_lb: float = ranged(1.0, ">= 0")
    """`clip_cov`: lower bound of the centred covariance (log pi - mean) * (A - mean) of a token that may
    be detached (the paper's 1.0)."""
    clip_cov_ub: float = ranged(5.0, ">= 0")
    """`clip_cov`: upper bound of that covariance (the paper's 5.0); must be >= clip_cov_lb."""
    kl_cov_ratio: float = ranged(2e-3, "in [0, 1]", "0 = penalise nothing")
    """`kl_cov`: fraction of a micro-batch's model tokens, those of largest covariance, that get the
    |log r| penalty instead of the clip (the paper's 2e-3 for 7B models; 2e-4 for 32B)."""
    kl_cov_coef: float = ranged(1.0, ">= 0")
    """`kl_cov`: weight of the |log r| penalty on those tokens (the paper's 1.0)."""
    skip_flat_responses: bool = True
    """Leave the responses whose every advantage is 0 (a group whose scores are all equal) out of the
    update's forward and backward: under a policy loss that reads each response apart (every built-in
    but `clip_cov` and `kl_cov`) with no KL loss and no entropy bonus their gradient is exactly 0, and
    the loss's denominators stay the whole mini-batch's, so the step is the same. The update's metrics
    then average over the responses it ran (`actor/flat_responses`: the share left out)."""
    use_kl_loss: bool = False
    """Add kl_loss_coef * KL(policy || reference) to the actor loss (GRPO's form; needs the reference)."""
    kl_loss_coef: float = ranged(0.001, ">= 0")
    """Weight of the KL loss."""
    kl_loss_type: str = "k3"
    """KL estimator of the loss: k1 (kl), abs, k2 (mse), k3 (low_var_kl)."""
    logprob_chunk_size: int = ranged(1024, ">= 1")
    """Tokens per chunk when turning hidden states into log-probs (bounds the vocab-sized buffer)."""
    use_dynamic_bsz: bool = False
    """Micro-batches by a token budget instead of a row count: rows sorted by length, so rows of
    similar length share a pass and little compute goes to padding. Replaces
    `ppo_micro_batch_size` and `log_prob_micro_batch_size`; the loss is the same (its denominators
    are the mini-batch's)."""
    ppo_max_token_len_per_gpu: int = ranged(8192, ">= 1")
    """With `use_dynamic_bsz`: padded tokens (rows x longest prompt + response) per update pass on
    one rank. Bounds activation memory; must hold the longest sequence."""
    log_prob_max_token_len_per_gpu: int = ranged(16384, ">= 1")
    """With `use_dynamic_bsz`: padded tokens per log-prob pass (no gradients, so it can be larger)."""


@dataclass
class CriticModelConfig:
    path: str = ""
    """Backbone of the critic; empty = the actor's `model.path`."""


@dataclass
class CriticConfig:
    enable: bool = False
    """Train a value model (needed by `gae`)."""
    model: CriticModelConfig = field(default_factory=CriticModelConfig)
    """Where the critic's backbone comes from."""
    optim: OptimConfig = field(default_factory=lambda: OptimConfig(lr=1e-5))
    """The critic's optimizer (default lr 1e-5)."""
    ppo_epochs: int = ranged(1, ">= 1")
    """Passes of the critic over each batch."""
    ppo_mini_batch_size: int = ranged(8, ">= 1")
    """Prompts per critic optimizer step (times `rollout.n` responses)."""
    ppo_micro_batch_size: int = ranged(16, ">= 1")
    """Responses per critic forward/backward pass."""
    use_dynamic_bsz: bool = False
    """Micro-batches by a token budget instead of `ppo_micro_batch_size` rows (as `actor.use_dynamic_bsz`)."""
    ppo_max_token_len_per_gpu: int = ranged(8192, ">= 1")
    """With `use_dynamic_bsz`: padded tokens per critic update pass on one rank."""
    forward_max_token_len_per_gpu: int = ranged(16384, ">= 1")
    """With `use_dynamic_bsz`: padded tokens per value pass without gradients."""
    cliprange_value: float = ranged(0.5, ">= 0", "0 = no clipping")
    """Value clipping range around the old values (PPO2); 0 = no clipping."""
    loss_agg_mode: str = "token-mean"
    """Aggregation of the value loss (as `actor.loss_agg_mode`)."""


@dataclass
class RefConfig:
    enable: bool = True
    """Allow a reference policy (built only when a KL term needs it; with LoRA it is the actor without adapters)."""
    log_prob_micro_batch_size: int = ranged(32, ">= 1")
    """Responses per reference forward pass."""
    logprob_chunk_size: int = ranged(1024, ">= 1")
    """Tokens per chunk when turning hidden states into log-probs (bounds the vocab-sized buffer)."""
    log_prob_use_dynamic_bsz: bool = False
    """Reference passes by a token budget instead of a row count (as `actor.use_dynamic_bsz`)."""
    log_prob_max_token_len_per_gpu: int = ranged(16384, ">= 1")
    """With `log_prob_use_dynamic_bsz`: padded tokens per reference pass on one rank."""


@dataclass
class TeacherModelConfig:
    path: str = ""
    """The teacher for on-policy distillation, in any form `model.path` takes; empty = no teacher. It must
    share the policy's tokenizer (same vocabulary, EOS and pad ids): it scores the policy's token ids."""


@dataclass
class TeacherConfig:
    model: TeacherModelConfig = field(default_factory=TeacherModelConfig)
    """The teacher model (loaded frozen, in `model.dtype`, sharded like the reference on N ranks)."""
    log_prob_micro_batch_size: int = ranged(32, ">= 1")
    """Responses per teacher forward pass."""
    logprob_chunk_size: int = ranged(1024, ">= 1")
    """Tokens per chunk when turning hidden states into log-probs (bounds the vocab-sized buffer)."""
    log_prob_use_dynamic_bsz: bool = False
    """Teacher passes by a token budget instead of a row count (as `actor.use_dynamic_bsz`)."""
    log_prob_max_token_len_per_gpu: int = ranged(16384, ">= 1")
    """With `log_prob_use_dynamic_bsz`: padded tokens per teacher pass on one rank."""


@dataclass
class RewardModelSubConfig:
    path: str = ""
    """A Hugging Face sequence-classification model directory (num_labels=1) or `tiny-random`."""


@dataclass
class RewardModelConfig:
    enable: bool = False
    """Score responses with a reward model (added to rule scores where a rule exists)."""
    model: RewardModelSubConfig = field(default_factory=RewardModelSubConfig)
    """The reward model."""
    coef: float = ranged(1.0, ">= 0")
    """Weight of the reward-model score in the total score."""
    micro_batch_size: int = ranged(32, ">= 1")
    """Responses per reward-model forward pass."""


@dataclass
class OverlongBufferConfig:
    enable: bool = False
    """DAPO overlong shaping: penalise responses that enter the last `len` tokens of the budget."""
    len: int = ranged(4, ">= 1")
    """Buffer length in tokens (model tokens only: observations do not count)."""
    penalty_factor: float = ranged(1.0, ">= 0")
    """Penalty at the full budget; it grows linearly across the buffer."""


@dataclass
class CustomFunctionConfig:
    path: str = ""
    """Python file defining the reward function. Empty = the built-in registry by `data_source`."""
    name: str = "compute_score"
    """Function name: `compute_score(data_source, solution_str, ground_truth, extra_info=None)`."""


DEFAULT_JUDGE_PROMPT = """You are grading an answer to a task. Read the task, the reference answer and the response, then rate how well the response solves the task, from 0 (wrong, or no answer) to 10 (fully correct).

Task:
{prompt}

Reference answer:
{ground_truth}

Response:
{response}

Give a one-sentence reason, then end with a line of the form "Score: N", N an integer from 0 to 10."""


@dataclass
class JudgeConfig:
    """An LLM as judge (docs/judges.md): each response is shown to a model behind an
    OpenAI-compatible endpoint with a rubric, and the score it writes back is part of the reward:
    `reward = rule + coef * judge`, the rule being the row's rule scorer (0 for a data source
    without one), the judge's score in [0, 1]. Training, validation and `turnrl eval` all score so."""

    enable: bool = False
    """Score responses with the judge too."""
    url: str = ""
    """The judge's OpenAI-compatible base URL (`http://host:8000/v1`; `/chat/completions` is
    appended). Empty = a `turnrl serve` child serving `model`, started with the run and stopped
    at its end."""
    model: str = ""
    """With `url` empty: the model the child judge serves (any `model.path` form: a Hugging Face
    directory or Hub id, `smollm2-135m-instruct`, `tiny-random`)."""
    device: str = "cpu"
    """Where the child judge runs: `cpu` (default: the policy keeps the GPU), `cuda` or `auto`."""
    api_key: str = ""
    """The key sent as `Authorization: Bearer ...`. Empty = $TURNRL_API_KEY, else $OPENAI_API_KEY;
    a child judge's own fresh key for the child."""
    model_name: str = ""
    """Sent as the request's `model`. Empty = the first model the endpoint lists (GET /v1/models,
    asked once at start-up)."""
    prompt: str = DEFAULT_JUDGE_PROMPT
    """The rubric, sent as one user message: `{prompt}` (the row's prompt messages as text),
    `{response}` (the decoded response) and `{ground_truth}` are filled in; `{response}` is
    required, other braces are left as written."""
    score_pattern: str = r"Score:\s*([0-9.]+)"
    """A regex with exactly one group: its last match in the judge's reply, read as a number, is
    the score. No match, a group that is not a number, or one outside [0, max_score] is an
    unparsed reply, a failure handled by `reward.on_error`."""
    max_score: float = ranged(10.0, "> 0")
    """The judge's score is divided by this into [0, 1]."""
    coef: float = ranged(1.0, ">= 0")
    """Weight of the judge's score: reward = rule + coef * judge."""
    temperature: float = ranged(0.0, ">= 0", "0 = greedy")
    """The judge's sampling temperature (0 = greedy: the same reply for the same request)."""
    max_tokens: int = ranged(256, ">= 1")
    """The longest reply the judge may write, in tokens."""
    concurrency: int = ranged(8, ">= 1")
    """Requests in flight at once."""
    timeout_s: float = ranged(60.0, "> 0")
    """Seconds one request may take before it is abandoned (and retried)."""
    max_retries: int = ranged(2, ">= 0")
    """Retries of a request that timed out, could not connect or got HTTP 408, 409, 429 or 5xx,
    with exponential back-off; then it is a failure handled by `reward.on_error`."""
    cache_size: int = ranged(10000, ">= 0", "0 = no cache")
    """Replies remembered (least recently used dropped first), keyed by the judge's model and
    the filled-in rubric (so by prompt, response and ground truth): a repeated response costs no
    request. 0 = no cache."""
    cache_file: str = ""
    """A JSONL file the cache is read from at start and appended to: replies kept across runs.
    Empty = in memory only."""
    startup_timeout_s: float = ranged(300.0, "> 0")
    """Seconds the child judge may take to load its model and answer /health."""


@dataclass
class RewardConfig:
    custom_function: CustomFunctionConfig = field(default_factory=CustomFunctionConfig)
    """A user reward function loaded from a file."""
    overlong_buffer: OverlongBufferConfig = field(default_factory=OverlongBufferConfig)
    """DAPO overlong reward shaping."""
    on_error: str = "fail_first_step"
    """A reward function (built-in or custom) that raises, times out or returns NaN / a non-number,
    or a judge call that fails (no answer after its retries, a reply without a score): `fail` stops the run naming the row's index and data_source; `zero` scores the row 0 and counts
    it in the `reward/errors` metric; `fail_first_step` stops during validation before training and
    the first training step (where a broken function shows), then counts as `zero`."""
    timeout_s: float = ranged(60.0, ">= 0", "0 = no limit")
    """Seconds one reward call may take. > 0: reward functions run in a child process that is killed
    and restarted when a call overruns (a hang cannot stall training); 0: in the trainer's process,
    without a limit."""
    judge: JudgeConfig = field(default_factory=JudgeConfig)
    """An LLM as judge: reward = rule + coef * judge (docs/judges.md)."""


@dataclass
class TrainerConfig:
    total_epochs: int = ranged(1, ">= 0")
    """Passes over the training data (bounded by `total_training_steps`)."""
    total_training_steps: int = ranged(0, ">= 0", "0 = run trainer.total_epochs")
    """Stop after this many steps; 0 = run `total_epochs` epochs."""
    critic_warmup: int = ranged(0, ">= 0")
    """Steps during which only the critic is trained (the actor is held back)."""
    test_freq: int = ranged(10, ">= 0", "0 = only before and after training")
    """Validate every this many steps (0 = only before and after training)."""
    val_before_train: bool = True
    """Validate once before the first step."""
    save_freq: int = ranged(0, ">= 0", "0 = only at the end")
    """Checkpoint every this many steps (0 = only at the end)."""
    max_checkpoints_to_keep: int = ranged(0, ">= 0", "0 = keep all")
    """Keep only the newest this many checkpoints (0 = keep all)."""
    default_local_dir: str = ""
    """Run directory. Empty = `runs/<experiment_name>-<timestamp>`."""
    experiment_name: str = "turnrl"
    """Name used for the run directory and loggers."""
    logger: list[str] = field(default_factory=lambda: ["console", "jsonl"])
    """Metric sinks: console, jsonl, tensorboard, wandb (the last two when installed)."""
    project_name: str = "turnrl"
    """Project name for loggers that group runs (wandb)."""
    rollout_dump_freq: int = ranged(0, ">= 0", "0 = off")
    """Write the step's samples (prompt, response, score) to `<run>/rollouts/` every this many steps (0 = off)."""
    seed: int = ranged(1, "in [0, 4294967295]", "numpy's seed range")
    """Seeds data order, sampling and initialisation."""
    deterministic: bool = False
    """GPU: deterministic kernels (`torch.use_deterministic_algorithms`, cuDNN deterministic,
    `CUBLAS_WORKSPACE_CONFIG=:4096:8`), so two runs with one seed give the same numbers; some
    kernels get slower (scatter/index_add fall back to serial versions) and an op without a
    deterministic version raises. CPU runs are deterministic without it."""
    resume: bool = True
    """Resume from the latest checkpoint in the run directory if there is one."""
    device: str = "auto"
    """`auto`, `cpu` or `cuda`."""
    nnodes: int = ranged(1, ">= 1")
    """Machines in the Ray cluster the run uses (data-parallel ranks = nnodes x n_gpus_per_node)."""
    n_gpus_per_node: int = ranged(1, ">= 1")
    """Ranks per machine: one per GPU; with `trainer.device=cpu`, CPU processes (2 on a 2-core laptop).
    1 rank in all = the single-process trainer, which never imports Ray."""
    ray_address: str = ""
    """Ray cluster to join (`ray start --head` prints it, e.g. `10.0.0.1:6379`); empty = start one on this machine."""
    balance_batch: bool = True
    """Split each batch over ranks by tokens (whole uid groups); false = contiguous groups."""
    num_threads: int = ranged(0, ">= 0", "0 = torch's default")
    """torch CPU threads (0 = torch's default)."""
    mode: str = "sync"
    """`sync`: rollout, then train, then the next rollout. `async`: the inference servers
    (`rollout.engine=server`) generate the next batches while the trainer updates (docs/async.md)."""
    max_staleness: int = ranged(2, ">= 0", "0 = no overlap")
    """Async mode: how many actor optimizer updates the policy may make between sampling a batch
    and training on it, counted in updates, not steps (a step makes `actor.ppo_epochs` x
    `data.train_batch_size / actor.ppo_mini_batch_size` of them; the default 8/4 x 1 = 2, so 2 =
    one step ahead). 0 = no overlap: exactly the synchronous run; between 0 and one step's updates
    is refused."""


@dataclass
class EvalConfig:
    """`turnrl eval`: score a model on held-out prompts, greedy and sampled (docs/eval.md). Training
    ignores this section; the prompts are batched by `data.val_batch_size` and the responses bounded
    by `data.max_response_length`, as in training's validation."""

    files: list[str] = field(default_factory=list)
    """Data files to evaluate on (verl-format parquet or JSONL). Empty = `data.val_files`, or the
    validation split of `data.task` when those are empty too: what training validates on."""
    max_prompts: int = ranged(0, ">= 0", "0 = all")
    """Evaluate only the first this many prompts (0 = all)."""
    greedy: bool = True
    """Run the greedy pass: one response per prompt at temperature 0 (training's `val/test_score`
    when `rollout.val_temperature=0` and `rollout.val_n=1`, the defaults)."""
    n: int = ranged(8, "in [0, 65536]", "0 = no sampled pass")
    """Responses per prompt in the sampled pass (0 = no sampled pass); pass@k is reported for
    k = 1, 2, 4, ... up to n, and for n itself."""
    temperature: float = ranged(1.0, ">= 0")
    """Sampling temperature of the sampled pass (> 0)."""
    top_p: float = ranged(1.0, "in (0, 1]")
    """Nucleus sampling threshold of the sampled pass (1.0 = off)."""
    top_k: int = ranged(0, ">= 0", "0 = off")
    """Top-k of the sampled pass (0 = off)."""
    success_threshold: float = ranged(1.0, "finite")
    """pass@k: a response solves its prompt when its score is at least this."""
    pack_weights: bool = False
    """`hf` engine on a CPU with oneDNN: the evaluated model, which never changes, reads its linear
    weights laid out once for oneDNN (`rollout/packed_linear.py`), faster at a decode step's few rows,
    about 0.5 GB more memory for the embedded model. Its products round differently from the BLAS's,
    so a greedy pass may part from the run's own validation on a near tie: off by default, where
    `turnrl eval` reproduces that validation exactly."""


@dataclass
class Config:
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    actor: ActorConfig = field(default_factory=ActorConfig)
    critic: CriticConfig = field(default_factory=CriticConfig)
    ref: RefConfig = field(default_factory=RefConfig)
    teacher: TeacherConfig = field(default_factory=TeacherConfig)
    """On-policy distillation's teacher (`algorithm.adv_estimator=opd` or `algorithm.distill_coef`)."""
    reward: RewardConfig = field(default_factory=RewardConfig)
    reward_model: RewardModelConfig = field(default_factory=RewardModelConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    """`turnrl eval` only: which prompts, the greedy and sampled passes, the pass@k threshold."""
    live: LiveConfig = field(default_factory=LiveConfig)
    """`turnrl live serve` only: clients, sessions, rewards that arrive later, groups (docs/live.md)."""
