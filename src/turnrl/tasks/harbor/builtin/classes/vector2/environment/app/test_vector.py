import unittest

import vector


class TestVector(unittest.TestCase):
    def test_add(self):
        self.assertEqual(vector.Vector(1, 2) + vector.Vector(3, 4), vector.Vector(4, 6))


if __name__ == "__main__":
    unittest.main()
