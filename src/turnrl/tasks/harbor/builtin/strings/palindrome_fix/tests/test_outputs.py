"""The hidden tests: test.sh runs them against the workspace."""

import unittest

import checks


class TestOutputs(unittest.TestCase):
    def test_sentence(self):
        self.assertTrue(checks.is_palindrome("A man, a plan, a canal: Panama"))

    def test_case(self):
        self.assertTrue(checks.is_palindrome("RaceCar"))

    def test_not(self):
        self.assertFalse(checks.is_palindrome("Hello"))
        self.assertTrue(checks.is_palindrome(""))


if __name__ == "__main__":
    unittest.main()
