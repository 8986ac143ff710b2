"""The hidden tests: test.sh runs them against the workspace."""

import unittest

import bank


class TestOutputs(unittest.TestCase):
    def test_overdraft(self):
        acct = bank.Account("bo", 5)
        with self.assertRaisesRegex(ValueError, "insufficient funds"):
            acct.withdraw(6)
        self.assertEqual(acct.balance, 5)

    def test_exact(self):
        acct = bank.Account("cy", 5)
        acct.withdraw(5)
        self.assertEqual(acct.balance, 0)

    def test_non_positive(self):
        acct = bank.Account("di", 5)
        for amount in (0, -1):
            with self.assertRaises(ValueError):
                acct.withdraw(amount)
        self.assertEqual(acct.balance, 5)


if __name__ == "__main__":
    unittest.main()
