import unittest

import bases


class TestBases(unittest.TestCase):
    def test_binary(self):
        self.assertEqual(bases.to_base(10, 2), "1010")


if __name__ == "__main__":
    unittest.main()
