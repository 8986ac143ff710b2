import unittest

import calc


class TestCalc(unittest.TestCase):
    def test_precedence(self):
        self.assertEqual(calc.evaluate("3 + 4*2"), 11)


if __name__ == "__main__":
    unittest.main()
