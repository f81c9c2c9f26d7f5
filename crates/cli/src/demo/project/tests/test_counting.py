import unittest

from wordstats import top_words, words


class WordsTest(unittest.TestCase):
    def test_words_are_lower_cased_without_punctuation(self):
        self.assertEqual(words("The cat, the hat."), ["the", "cat", "the", "hat"])


class TopWordsTest(unittest.TestCase):
    def test_the_n_most_frequent_words_come_first(self):
        text = "to be or not to be that is the question to be"
        self.assertEqual(top_words(text, 2), [("be", 3), ("to", 3)])

    def test_equal_counts_are_in_alphabetical_order(self):
        self.assertEqual(top_words("b a c", 3), [("a", 1), ("b", 1), ("c", 1)])

    def test_asking_for_more_words_than_there_are(self):
        self.assertEqual(top_words("one two", 5), [("one", 1), ("two", 1)])
