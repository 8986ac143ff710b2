"""The rules of an SFT or RM config that a type system cannot express: `check_sft`, `check_rm`."""

from __future__ import annotations

from turnrl.config.checks import DTYPES, LOGGERS, ConfigError, check_ranges
from turnrl.config.supervised_schema import RMConfig, SFTConfig
from turnrl.workers.optim import LR_DECAYS

TRUNCATIONS = ("drop", "right")
TOOL_CALLS = ("template", "inline")
DEVICES = ("auto", "cpu", "cuda")


def check_sft(cfg: SFTConfig) -> None:
    _check_common(
        cfg, 'rows {"messages": [{"role", "content"}, ...]} or agent episodes {"prompt", "episode"}'
    )
    _one_of("data.tool_calls", cfg.data.tool_calls, TOOL_CALLS)


def check_rm(cfg: RMConfig) -> None:
    _check_common(cfg, 'rows {"prompt", "chosen", "rejected"}')
    if cfg.data.truncation != "drop":
        raise ConfigError(
            f"'data.truncation'={cfg.data.truncation!r}: a reward model reads its score at the last token, "
            "so a pair longer than data.max_length can only be dropped; use data.truncation=drop"
        )


def _check_common(cfg: SFTConfig | RMConfig, rows: str) -> None:
    check_ranges(cfg)  # every number's range: declared on the schema's fields, as for `turnrl train`
    d, t = cfg.data, cfg.trainer
    if not d.train_files:
        raise ConfigError(f"'data.train_files' is empty: give JSONL or parquet files of {rows}")
    _one_of("data.truncation", d.truncation, TRUNCATIONS)
    _one_of("model.dtype", cfg.model.dtype, DTYPES)
    _one_of("trainer.device", t.device, DEVICES)
    _one_of("optim.lr_decay", cfg.optim.lr_decay, LR_DECAYS)
    for name in t.logger:
        _one_of("trainer.logger", name, LOGGERS)
    if t.total_training_steps == 0 and t.total_epochs < 1:
        raise ConfigError(
            f"'trainer.total_epochs'={t.total_epochs} with trainer.total_training_steps=0 trains nothing"
        )


def _one_of(key: str, value: str, valid: tuple[str, ...]) -> None:
    if value not in valid:
        raise ConfigError(f"'{key}' must be one of {', '.join(valid)}; got {value!r}")
