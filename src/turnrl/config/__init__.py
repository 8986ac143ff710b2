from turnrl.config.loader import ConfigError, field_docs, load_config, to_yaml
from turnrl.config.schema import Config

__all__ = ["Config", "ConfigError", "field_docs", "load_config", "to_yaml"]
