"""The typed configuration of `turnrl sft` and `turnrl rm`: supervised stages before RL.

Same system as `turnrl train` (defaults < recipe YAML < dotted overrides, unknown keys refused
with a suggestion); `model` and `optim` are the RL trainer's sections, so a model that works
there works here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from turnrl.config.agent_schema import (
    CalculatorToolConfig,
    MultiTurnConfig,
    PythonToolConfig,
    SearchToolConfig,
)
from turnrl.config.rules import ranged
from turnrl.config.schema import ModelConfig, OptimConfig


@dataclass
class SupervisedDataConfig:
    train_files: list[str] = field(default_factory=list)
    """Training rows: JSONL or parquet files (required)."""
    val_files: list[str] = field(default_factory=list)
    """Validation rows, same format; empty = no validation."""
    max_length: int = ranged(1024, ">= 1")
    """Tokens per example (SFT: the whole conversation; RM: prompt + one response)."""
    truncation: str = "drop"
    """An example longer than `max_length`: `drop` it, or cut it on the `right` (SFT only; the
    loss then covers the assistant tokens that fit). Either way it is counted and reported."""
    shuffle: bool = True
    """Shuffle the training rows each epoch (seeded by `trainer.seed` and the epoch)."""
    length_window: int = ranged(4, ">= 0", "0 = no sorting")
    """Length grouping: the shuffled rows are sorted by length within windows of this many batches,
    cut into batches (their order within the window shuffled again), and each batch is sorted too, so
    a micro-batch holds rows of similar length and is padded only to its own longest row.
    1 = sort within each batch only (batches as drawn); 0 = no sorting."""
    chat_template: str = ""
    """A Jinja chat template replacing the tokenizer's: a file path or the template text itself.
    Empty = the tokenizer's own. It is saved with the output model, so `turnrl train` renders
    prompts the same way."""


@dataclass
class SFTDataConfig(SupervisedDataConfig):
    messages_key: str = "messages"
    """Row field holding the conversation: OpenAI/verl messages `[{role, content, tool_calls?}, ...]`."""
    tools_key: str = "tools"
    """Row field holding the tool schemas the chat template renders (optional per row)."""
    tool_calls: str = "template"
    """How an assistant message's `tool_calls` become text: `template` (the chat template renders
    them; a template that cannot fails naming the row) or `inline` (written into the message content
    as `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`, the form `turnrl train`'s JSON
    agent format parses: for templates without tool-call support, like SmolLM2's)."""
    episode_key: str = "episode"
    """Row field holding an XML agent episode (docs/sft.md): the model's turns and the observations
    between them, `[{"role": "assistant" | "observation", "content", "tag"?}, ...]`. A row with this
    field is an episode row, tokenised as the agent loop builds its episodes (the loss covers the
    model's turns only, like RL's `response_mask`); a row without it is a chat row (`messages_key`)."""
    prompt_key: str = "prompt"
    """Episode rows: the field holding the prompt, chat messages or text, as in `turnrl train`'s rows."""
    episode_stops: list[str] = field(
        default_factory=lambda: [
            f"</{tag}>"
            for tag in (
                SearchToolConfig.tag,
                PythonToolConfig.tag,
                CalculatorToolConfig.tag,
                MultiTurnConfig.answer_tag,
            )
        ]
    )
    """Episode rows: the strings the agent loop stops a model turn at (its tools' and answer's closing
    tags, and any `rollout.stop`). A turn ending in one ends there, as generation does; any other turn
    ends with EOS, the only other way a model ends a turn. A turn holding one before its end is refused."""
    max_obs_length: int = ranged(MultiTurnConfig.max_obs_length, ">= 1")
    """Episode rows: tokens of one tool output; longer ones are cut as `rollout.multi_turn.max_obs_length`
    cuts them (set both alike)."""
    obs_truncation_marker: str = MultiTurnConfig.obs_truncation_marker
    """Episode rows: what ends a cut tool output, as `rollout.multi_turn.obs_truncation_marker`."""


@dataclass
class RMDataConfig(SupervisedDataConfig):
    prompt_key: str = "prompt"
    """Row field holding the prompt: chat messages or plain text."""
    chosen_key: str = "chosen"
    """Row field holding the preferred response (text, or an assistant message)."""
    rejected_key: str = "rejected"
    """Row field holding the dispreferred response."""


@dataclass
class SupervisedTrainerConfig:
    total_epochs: int = ranged(1, ">= 0")
    """Passes over the training rows (bounded by `total_training_steps`)."""
    total_training_steps: int = ranged(0, ">= 0", "0 = run trainer.total_epochs")
    """Stop after this many optimizer steps; 0 = run `total_epochs` epochs."""
    train_batch_size: int = ranged(16, ">= 1")
    """Examples (conversations or preference pairs) per optimizer step."""
    micro_batch_size: int = ranged(4, ">= 1")
    """Examples per forward/backward pass; gradients accumulate over a step's micro-batches."""
    test_freq: int = ranged(0, ">= 0", "0 = only at the end")
    """Validate every this many steps (0 = only at the end, when `data.val_files` are given)."""
    save_freq: int = ranged(0, ">= 0", "0 = only at the end")
    """Checkpoint every this many steps (0 = only at the end)."""
    max_checkpoints_to_keep: int = ranged(0, ">= 0", "0 = keep all")
    """Keep only the newest this many checkpoints (0 = keep all)."""
    default_local_dir: str = ""
    """Run directory. Empty = `runs/<experiment_name>-<timestamp>`."""
    experiment_name: str = "turnrl-sft"
    """Name used for the run directory and loggers."""
    logger: list[str] = field(default_factory=lambda: ["console", "jsonl"])
    """Metric sinks: console, jsonl, tensorboard, wandb (the last two when installed)."""
    project_name: str = "turnrl"
    """Project name for loggers that group runs (wandb)."""
    seed: int = ranged(1, "in [0, 4294967295]", "numpy's seed range")
    """Seeds data order and initialisation."""
    resume: bool = True
    """Resume from the newest checkpoint in the run directory, if any."""
    device: str = "auto"
    """`auto` (cuda when available), `cpu` or `cuda`."""
    num_threads: int = ranged(0, ">= 0", "0 = torch's default")
    """torch CPU threads (0 = torch's default)."""
    logprob_chunk_size: int = ranged(1024, ">= 1")
    """SFT: tokens per chunk of the vocabulary head; peak memory is one chunk's float32 logits."""


@dataclass
class SFTConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    data: SFTDataConfig = field(default_factory=SFTDataConfig)
    optim: OptimConfig = field(default_factory=lambda: OptimConfig(lr=1e-5))
    trainer: SupervisedTrainerConfig = field(default_factory=SupervisedTrainerConfig)


@dataclass
class RMConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    data: RMDataConfig = field(default_factory=RMDataConfig)
    optim: OptimConfig = field(default_factory=lambda: OptimConfig(lr=1e-5))
    trainer: SupervisedTrainerConfig = field(
        default_factory=lambda: SupervisedTrainerConfig(experiment_name="turnrl-rm")
    )
