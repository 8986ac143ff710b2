import unittest

import checks


class TestChecks(unittest.TestCase):
    def test_simple(self):
        self.assertTrue(checks.is_palindrome("level"))
        self.assertFalse(checks.is_palindrome("levels"))


if __name__ == "__main__":
    unittest.main()
