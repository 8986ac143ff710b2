"""The hidden tests: test.sh runs them against the workspace."""

import unittest

import wrapping


class TestOutputs(unittest.TestCase):
    def test_greedy(self):
        self.assertEqual(wrapping.wrap("a b c d e", 3), ["a b", "c d", "e"])

    def test_long_word(self):
        self.assertEqual(wrapping.wrap("hi extraordinary yo", 5), ["hi", "extraordinary", "yo"])

    def test_blank(self):
        self.assertEqual(wrapping.wrap("   ", 5), [])

    def test_spaces(self):
        self.assertEqual(wrapping.wrap("  one   two  ", 20), ["one two"])


if __name__ == "__main__":
    unittest.main()
