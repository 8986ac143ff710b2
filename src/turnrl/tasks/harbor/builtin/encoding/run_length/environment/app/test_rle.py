import unittest

import rle


class TestRle(unittest.TestCase):
    def test_encode(self):
        self.assertEqual(rle.encode("aaabcc"), "3a1b2c")


if __name__ == "__main__":
    unittest.main()
