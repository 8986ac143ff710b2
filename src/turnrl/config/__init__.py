from turnrl.config.checks import ConfigError, check_config
from turnrl.config.loader import field_docs, key_listing, load_config, to_yaml
from turnrl.config.schema import Config

__all__ = ["Config", "ConfigError", "check_config", "field_docs", "key_listing", "load_config", "to_yaml"]
