import unittest

import wordstats


class LongestWordTest(unittest.TestCase):
    def test_the_longest_word(self):
        self.assertEqual(wordstats.longest_word("a quick brown fox"), "quick")

    def test_the_first_of_equally_long_words(self):
        self.assertEqual(wordstats.longest_word("red fox and cat"), "red")

    def test_no_words_at_all(self):
        self.assertIsNone(wordstats.longest_word("... !"))
