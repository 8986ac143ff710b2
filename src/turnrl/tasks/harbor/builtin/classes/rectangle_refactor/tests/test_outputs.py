"""The hidden tests: test.sh runs them against the workspace."""

import unittest

import shapes


class TestOutputs(unittest.TestCase):
    def test_properties(self):
        r = shapes.Rectangle(2.5, 4)
        self.assertEqual((r.area, r.perimeter), (10.0, 13.0))
        with self.assertRaises(AttributeError):
            r.area = 1

    def test_describe_kept(self):
        self.assertEqual(shapes.Rectangle(1, 1).describe(), "1x1 rectangle: area 1, perimeter 4")

    def test_uses_properties(self):
        import inspect

        source = inspect.getsource(shapes.Rectangle.describe)
        self.assertIn("self.area", source)
        self.assertIn("self.perimeter", source)


if __name__ == "__main__":
    unittest.main()
