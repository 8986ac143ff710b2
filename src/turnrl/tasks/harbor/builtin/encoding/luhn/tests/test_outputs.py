"""The hidden tests: test.sh runs them against the workspace."""

import unittest

import luhn


class TestOutputs(unittest.TestCase):
    def test_invalid(self):
        self.assertFalse(luhn.luhn_valid("8273 1232 7352 0569"))

    def test_short_and_bad(self):
        self.assertFalse(luhn.luhn_valid("0"))
        self.assertTrue(luhn.luhn_valid("0 0"))
        self.assertFalse(luhn.luhn_valid("4539-3195"))

    def test_known(self):
        self.assertTrue(luhn.luhn_valid("79927398713"))
        self.assertFalse(luhn.luhn_valid("79927398710"))


if __name__ == "__main__":
    unittest.main()
