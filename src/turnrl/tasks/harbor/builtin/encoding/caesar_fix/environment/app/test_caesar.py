import unittest

import caesar


class TestCaesar(unittest.TestCase):
    def test_simple(self):
        self.assertEqual(caesar.shift("abc", 1), "bcd")


if __name__ == "__main__":
    unittest.main()
