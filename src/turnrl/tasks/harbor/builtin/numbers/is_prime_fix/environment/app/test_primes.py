import unittest

import primes


class TestPrimes(unittest.TestCase):
    def test_small(self):
        self.assertTrue(primes.is_prime(7))
        self.assertFalse(primes.is_prime(9))


if __name__ == "__main__":
    unittest.main()
