"""The words of the full-text index, the same on PostgreSQL and SQLite.

Both engines are used with language-neutral tokenizers — PostgreSQL's `simple` configuration, FTS5's
`unicode61` — because a knowledge base holds documents in any language and a stemming configuration
(`english`) mangles every other one. Neither splits CJK text into words: a run such as 中文检索 is one
token, so a query for 检索 would never match it. The indexed text is therefore completed with the run's
single characters and overlapping bigrams (`search_terms`), and a query's CJK runs are searched by the
same bigrams: the usual n-gram answer for CJK full-text search without a segmenter.

A query is an OR of its terms ranked by the engine (ts_rank_cd, bm25), not an AND: a question in natural
words rarely has every one of them in the passage that answers it. Common English function words are left
out of a query that has other words, so that they do not make every chunk a candidate.
"""

from __future__ import annotations

import re

# Han, Hiragana, Katakana, Hangul (syllables and jamo), and the CJK compatibility ideographs.
_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\u1100-\u11ff\uf900-\ufaff"
_CJK_RUN = re.compile(f"[{_CJK}]+")
_WORD = re.compile(r"\w+")
# Terms of one query: enough for a long question, few enough to keep the OR query cheap.
MAX_QUERY_TERMS = 32
_STOPWORDS = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "but",
        "by",
        "can",
        "do",
        "does",
        "did",
        "for",
        "from",
        "had",
        "has",
        "have",
        "how",
        "i",
        "if",
        "in",
        "into",
        "is",
        "it",
        "its",
        "me",
        "my",
        "no",
        "not",
        "of",
        "on",
        "or",
        "our",
        "so",
        "than",
        "that",
        "the",
        "their",
        "them",
        "then",
        "there",
        "these",
        "they",
        "this",
        "to",
        "was",
        "we",
        "were",
        "what",
        "when",
        "where",
        "which",
        "who",
        "whom",
        "why",
        "will",
        "with",
        "you",
        "your",
    ]
)


def _cjk_grams(run: str) -> list[str]:
    if len(run) == 1:
        return [run]
    return [run[i : i + 2] for i in range(len(run) - 1)]


def search_terms_of(text: str) -> str:
    """The extra index words of `text`: each CJK run's characters and bigrams ("" without CJK)."""
    extra: list[str] = []
    for run in _CJK_RUN.findall(text):
        extra.extend(run)
        if len(run) > 1:
            extra.extend(_cjk_grams(run))
    return " ".join(extra)


def query_terms(query: str) -> list[str]:
    """The distinct, lower-cased terms of a query, in order: words, and CJK runs as bigrams. Terms are
    word characters only, so they are safe inside either engine's query syntax once quoted."""
    terms: list[str] = []
    for word in _WORD.findall(query.lower()):
        start = 0
        for run in _CJK_RUN.finditer(word):
            terms.extend(part for part in _WORD.findall(word[start : run.start()].replace("_", " ")))
            terms.extend(_cjk_grams(run.group()))
            start = run.end()
        terms.extend(_WORD.findall(word[start:].replace("_", " ")))
    distinct = list(dict.fromkeys(terms))
    content = [term for term in distinct if term not in _STOPWORDS]
    return (content or distinct)[:MAX_QUERY_TERMS]


def postgres_tsquery(terms: list[str]) -> str:
    """`'a' | 'b'` for `to_tsquery('simple', ...)`."""
    return " | ".join(f"'{term}'" for term in terms)


def fts5_query(terms: list[str]) -> str:
    """`"a" OR "b"` for an FTS5 MATCH."""
    return " OR ".join(f'"{term}"' for term in terms)
