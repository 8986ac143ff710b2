import unittest

import stack


class TestStack(unittest.TestCase):
    def test_push_pop(self):
        s = stack.Stack()
        s.push(1)
        s.push(2)
        self.assertEqual(s.pop(), 2)


if __name__ == "__main__":
    unittest.main()
