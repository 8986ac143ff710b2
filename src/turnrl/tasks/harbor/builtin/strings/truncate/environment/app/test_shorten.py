import unittest

import shorten


class TestShorten(unittest.TestCase):
    def test_short(self):
        self.assertEqual(shorten.truncate("hi", 10), "hi")

    def test_cut(self):
        self.assertEqual(shorten.truncate("hello world", 8), "hello...")


if __name__ == "__main__":
    unittest.main()
