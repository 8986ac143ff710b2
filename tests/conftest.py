"""Shared pytest setup: keep tests single-threaded-friendly on a 2-core machine."""

import os

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
