"""wordstats: small word statistics for plain text."""

from .counting import top_words, words

__all__ = ["top_words", "words"]
