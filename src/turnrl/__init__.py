"""turnrl: reinforcement-learning post-training for language models and agents."""

__version__ = "0.1.0"
