import unittest

import nesting


class TestNesting(unittest.TestCase):
    def test_one_level(self):
        self.assertEqual(nesting.flatten([1, [2, 3], 4]), [1, 2, 3, 4])


if __name__ == "__main__":
    unittest.main()
