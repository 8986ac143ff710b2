"""Errors that stop a run at start-up with one line (no traceback): bad input, not bugs."""

from turnrl.config import ConfigError
from turnrl.data.dataset import DataError
from turnrl.models.loader import ModelError
from turnrl.rewards.registry import RewardError

STARTUP_ERRORS: tuple[type[Exception], ...] = (
    ConfigError,
    DataError,
    ModelError,
    RewardError,
    FileNotFoundError,
    ValueError,
)
