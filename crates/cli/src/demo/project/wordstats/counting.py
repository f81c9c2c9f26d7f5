"""Counting the words of a text."""

import re
from collections import Counter

WORD = re.compile(r"[a-z']+")


def words(text):
    """The words of `text`, lower-cased, in order."""
    return WORD.findall(text.lower())


def top_words(text, n):
    """The `n` most frequent words of `text` as (word, count) pairs, most frequent first;
    words with the same count are in alphabetical order."""
    counts = Counter(words(text))
    ranked = sorted(counts.items(), key=lambda pair: (-pair[1], pair[0]))
    return ranked[: n - 1]
