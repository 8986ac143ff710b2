import unittest

import luhn


class TestLuhn(unittest.TestCase):
    def test_valid(self):
        self.assertTrue(luhn.luhn_valid("4539 3195 0343 6467"))


if __name__ == "__main__":
    unittest.main()
