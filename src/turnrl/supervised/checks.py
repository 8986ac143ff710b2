"""The rules of an SFT or RM config that a type system cannot express: `check_sft`, `check_rm`."""

from __future__ import annotations

from turnrl.config.checks import DTYPES, LOGGERS, ConfigError
from turnrl.config.supervised_schema import RMConfig, SFTConfig

TRUNCATIONS = ("drop", "right")
TOOL_CALLS = ("template", "inline")
DEVICES = ("auto", "cpu", "cuda")


def check_sft(cfg: SFTConfig) -> None:
    _check_common(
        cfg, 'rows {"messages": [{"role", "content"}, ...]} or agent episodes {"prompt", "episode"}'
    )
    _one_of("data.tool_calls", cfg.data.tool_calls, TOOL_CALLS)
    if cfg.data.max_obs_length < 1:
        raise ConfigError(f"'data.max_obs_length' must be >= 1, got {cfg.data.max_obs_length}")


def check_rm(cfg: RMConfig) -> None:
    _check_common(cfg, 'rows {"prompt", "chosen", "rejected"}')
    if cfg.data.truncation != "drop":
        raise ConfigError(
            f"'data.truncation'={cfg.data.truncation!r}: a reward model reads its score at the last token, "
            "so a pair longer than data.max_length can only be dropped; use data.truncation=drop"
        )


def _check_common(cfg: SFTConfig | RMConfig, rows: str) -> None:
    d, t = cfg.data, cfg.trainer
    if not d.train_files:
        raise ConfigError(f"'data.train_files' is empty: give JSONL or parquet files of {rows}")
    _one_of("data.truncation", d.truncation, TRUNCATIONS)
    _one_of("model.dtype", cfg.model.dtype, DTYPES)
    _one_of("trainer.device", t.device, DEVICES)
    for name in t.logger:
        _one_of("trainer.logger", name, LOGGERS)
    for key, value in (
        ("data.max_length", d.max_length),
        ("trainer.train_batch_size", t.train_batch_size),
        ("trainer.micro_batch_size", t.micro_batch_size),
        ("trainer.logprob_chunk_size", t.logprob_chunk_size),
    ):
        if value < 1:
            raise ConfigError(f"'{key}' must be >= 1, got {value}")
    for key, value in (
        ("data.length_window", d.length_window),
        ("trainer.total_training_steps", t.total_training_steps),
        ("trainer.test_freq", t.test_freq),
        ("trainer.save_freq", t.save_freq),
        ("trainer.max_checkpoints_to_keep", t.max_checkpoints_to_keep),
        ("trainer.num_threads", t.num_threads),
        ("model.lora_rank", cfg.model.lora_rank),
    ):
        if value < 0:
            raise ConfigError(f"'{key}' must be >= 0, got {value}")
    if t.total_training_steps == 0 and t.total_epochs < 1:
        raise ConfigError(
            f"'trainer.total_epochs'={t.total_epochs} with trainer.total_training_steps=0 trains nothing"
        )


def _one_of(key: str, value: str, valid: tuple[str, ...]) -> None:
    if value not in valid:
        raise ConfigError(f"'{key}' must be one of {', '.join(valid)}; got {value!r}")
