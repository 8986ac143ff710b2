"""The hidden tests: test.sh runs them against the workspace."""

import unittest

import calc


class TestOutputs(unittest.TestCase):
    def test_tokenize(self):
        self.assertEqual(calc.tokenize("3 + 4*2"), ["3", "+", "4", "*", "2"])
        self.assertEqual(calc.tokenize("12-  7"), ["12", "-", "7"])

    def test_behaviour_kept(self):
        self.assertEqual(calc.evaluate("10 - 2*3 + 1"), 5)
        self.assertEqual(calc.evaluate("7"), 7)
        with self.assertRaises(ValueError):
            calc.evaluate("2 / 1")

    def test_tokenize_errors(self):
        with self.assertRaises(ValueError):
            calc.tokenize("1 ^ 2")


if __name__ == "__main__":
    unittest.main()
