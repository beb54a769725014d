"""Which encyclopedia articles a question *names*: the rule that builds wiki-vital QA's judgments.

A question names an article when one of the article's *name forms* occurs in the question as a
whole phrase. Both are compared after :func:`normalise_phrase` (accents, case and punctuation
dropped, so "Doll's House" = "doll s house" and "Notre-Dame" = "notre dame"). An article's name forms:

1. its title: "Casablanca (film)" → "casablanca film";
2. its title without a trailing parenthetical qualifier: "Casablanca";
3. either of those without a leading "The", "A" or "An": "The Great Gatsby" → "Great Gatsby";
4. for titles "Place, Region" whose both parts are capitalised names: the place, "Nashville, Tennessee"
   → "Nashville".

A name form is refused (the rule prefers precision to recall) when it is

* shorter than :data:`MIN_FORM_CHARS` characters or has no letter ("Ur", "0", "1");
* a *common word*: a single word (or "the"/"a"/"an" + a single word, so "The Who" → "who")
  that the summaries write in lower case more often than as a capitalised word standing alone
  (not opening a sentence, not next to another capitalised word: "Sea" in "North Sea" is part of
  another name) **and** that occurs in more than :data:`RARE_WORD_SUMMARIES` of
  them. "Water", "Planet" and "Number" are common words; "Paris" and "Beethoven" are names
  (capitalised); "Indium" and "Lemur" are rare terms that name their article. NQ questions
  are all lower case, so the evidence comes from the summaries, where case is kept.

When name forms overlap in a question, only the longest is kept: "new york city" names New York City,
not New York (state) or York; forms that merely overlap (not nested) are both kept. A name form shared
by several articles ("casablanca") names them all; wiki-vital QA then keeps those whose summary holds
the answer.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from ..records import Passage

MIN_FORM_CHARS = 3
RARE_WORD_SUMMARIES = 10  # a lower-case word in at most this many summaries is a term, not an everyday word
MAX_FORM_TOKENS = 12
LEADING_ARTICLES = ("the", "a", "an")
_QUALIFIER = re.compile(r"\s*\([^()]*\)\s*$")
_WORD = re.compile(r"[^\W_]+")
_NAME_PART = re.compile(r"[A-Z0-9][^\s,]*(?:\s+[A-Z0-9][^\s,]*){0,3}")


def normalise_phrase(text: str) -> str:
    """Lower case, accents removed, every run of non-alphanumerics one space."""
    decomposed = unicodedata.normalize("NFKD", text)
    plain = "".join(ch for ch in decomposed if not unicodedata.combining(ch))
    return " ".join(_WORD.findall(plain.casefold()))


def name_forms(title: str) -> list[str]:
    """The normalised name forms of an article title, rule by rule (before refusals), without repeats."""
    forms = [title]
    bare = _QUALIFIER.sub("", title)
    forms.append(bare)
    head, comma, region = bare.partition(",")
    if comma and "," not in region and _NAME_PART.fullmatch(head.strip()) and _NAME_PART.fullmatch(region.strip()):
        forms.append(head)
    for form in list(forms):
        first, _space, rest = form.partition(" ")
        if first.casefold() in LEADING_ARTICLES and rest:
            forms.append(rest)
    normalised = []
    for form in forms:
        if (text := normalise_phrase(form)) and text not in normalised:
            normalised.append(text)
    return normalised


@dataclass(slots=True)
class WordEvidence:
    """How the summaries write each normalised word: lower case or capitalised inside a sentence (not
    as its first word), and in how many summaries it occurs at all."""

    lower: Counter[str]
    upper: Counter[str]
    summaries: Counter[str]

    @classmethod
    def of(cls, texts: Iterable[str]) -> WordEvidence:
        evidence = cls(Counter(), Counter(), Counter())
        for text in texts:
            evidence.summaries.update(set(normalise_phrase(text).split()))
            for sentence in re.split(r"(?<=[.!?;:])\s+|\n+", text):
                words = _WORD.findall(sentence)
                for i in range(1, len(words)):
                    word = words[i]
                    if word[0].islower():
                        evidence.lower[normalise_phrase(word)] += 1
                    elif word[0].isupper() and not _capitalised(words[i - 1]) and not (
                            i + 1 < len(words) and _capitalised(words[i + 1])):
                        # Only a capital standing alone is evidence of a name: "Sea" in "North Sea" and
                        # "Pearl" in "Pearl Harbor" are parts of other names.
                        evidence.upper[normalise_phrase(word)] += 1
        return evidence

    def is_common_word(self, word: str) -> bool:
        """Written in lower case more often than as a capitalised word of its own, and not rare."""
        return self.lower[word] > self.upper[word] and self.summaries[word] > RARE_WORD_SUMMARIES


def _capitalised(word: str) -> bool:
    return word[0].isupper()


@dataclass(frozen=True, slots=True)
class NamedArticle:
    """An article a question names: its id, the name form found, and the token span it covers."""

    article_id: str
    form: str
    start: int
    end: int


class ArticleNames:
    """The name forms of a set of articles, and the rule that finds the articles a question names."""

    def __init__(self, articles: Iterable[Passage]) -> None:
        articles = list(articles)
        self.evidence = WordEvidence.of(article.text for article in articles)
        self.forms: dict[str, list[str]] = {}  # normalised form -> article ids, in corpus order
        self.refused: dict[str, str] = {}  # normalised form -> why it is refused
        for article in articles:
            for form in name_forms(article.title):
                if (reason := self.refusal(form)) is not None:
                    self.refused[form] = reason
                    continue
                ids = self.forms.setdefault(form, [])
                if article.id not in ids:
                    ids.append(article.id)

    def refusal(self, form: str) -> str | None:
        """Why a name form is refused (``"too short"``, ``"no letter"``, ``"common word"``), or None."""
        if len(form.replace(" ", "")) < MIN_FORM_CHARS:
            return "too short"
        if not any(ch.isalpha() for ch in form):
            return "no letter"
        words = form.split()
        if len(words) == 2 and words[0] in LEADING_ARTICLES:
            words = words[1:]
        if len(words) == 1 and self.evidence.is_common_word(words[0]):
            return "common word"
        return None

    def named_in(self, question: str) -> list[NamedArticle]:
        """The articles ``question`` names, by the longest-match rule, in order of position."""
        tokens = normalise_phrase(question).split()
        found = []
        for start in range(len(tokens)):
            for end in range(start + 1, min(len(tokens), start + MAX_FORM_TOKENS) + 1):
                form = " ".join(tokens[start:end])
                for article_id in self.forms.get(form, ()):
                    found.append(NamedArticle(article_id, form, start, end))
        spans = {(match.start, match.end) for match in found}
        return [match for match in found if not any(
            start <= match.start and match.end <= end and (start, end) != (match.start, match.end)
            for start, end in spans)]
