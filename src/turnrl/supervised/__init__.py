"""Supervised stages before RL: `turnrl sft` (a warm start on chat data) and `turnrl rm` (a reward
model from preference pairs). One loop (`trainer.py`) runs both; an objective (`sft.py`, `rm.py`)
says what a row is, which model to build and what the loss of a micro-batch is.
"""
