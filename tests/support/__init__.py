"""Helpers shared by several test modules (scripted engines, fault injection, /proc scans).

Test modules import from here, never from each other, so each test file can be read, moved or
deleted on its own.
"""
