"""The hidden tests: test.sh runs them against the workspace."""

import unittest

import primes


class TestOutputs(unittest.TestCase):
    def test_edges(self):
        for n in (-7, 0, 1):
            self.assertFalse(primes.is_prime(n))
        self.assertTrue(primes.is_prime(2))

    def test_below(self):
        self.assertEqual(primes.primes_below(12), [2, 3, 5, 7, 11])


if __name__ == "__main__":
    unittest.main()
