"""Answer metrics: Exact Match, token F1, Accuracy and DPR's ``has_answer``.

* **Exact Match** and **token F1** use SQuAD v1.1's answer normalisation (lower-case, drop
  punctuation, drop the articles *a/an/the*, collapse white space) and take the best score over the
  gold answers. RankRAG §5.1 ("Evaluation Metrics") reports EM as the main OpenQA metric and F1 for
  multi-hop sets.
* **Accuracy** is the PopQA/TriviaQA convention RankRAG §5.1 and Table 2 report beside EM (after
  Mallen et al. 2023 and Asai et al. 2024): a generation is correct when it *contains* a gold
  answer. Containment is tested on SQuAD-normalised text, as FlashRAG's ``acc`` does, so "The
  Beatles." contains "beatles".
* **has_answer** decides whether a *passage* holds an answer, for answer Recall@k (RankRAG Tables 6
  and 8; the DPR convention, Karpukhin et al. 2020, §5.1). Text and answer are NFD-normalised,
  split into DPR's "simple" tokens (runs of letters, digits and combining marks, or any other single
  visible character), lower-cased, and the answer must appear as a contiguous token sequence. So
  "Paris" matches "Paris, France" but not "Parisian".

Regular-expression answers (CuratedTREC; flagged in a QA file's metadata as ``"answer_type":
"regex"``) are matched case-insensitively with ``re.IGNORECASE | re.UNICODE | re.MULTILINE``, like
DPR's ``regex_match``: a passage or generation holds the answer when the pattern is found anywhere
in it; Exact Match needs the pattern to match the *whole* prediction; token F1 of a regex answer is
its Exact Match (overlap of words with a pattern has no meaning).
"""

from __future__ import annotations

import re
import string
import sys
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from functools import lru_cache

from .errors import WinnowError

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = frozenset(string.punctuation)
_REGEX_FLAGS = re.IGNORECASE | re.UNICODE | re.MULTILINE


def normalize_answer(text: str) -> str:
    """SQuAD v1.1 normalisation: lower-case, drop punctuation and articles, collapse spaces."""
    text = text.lower()
    text = "".join(ch for ch in text if ch not in _PUNCTUATION)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def _check_answers(answers: Sequence[str] | str) -> Sequence[str]:
    # A bare string would silently be read as a list of one-character answers.
    if isinstance(answers, str):
        return [answers]
    return answers


@lru_cache(maxsize=4096)
def compile_answer_regex(pattern: str) -> re.Pattern[str]:
    """Compile a regex gold answer with DPR's flags; a broken pattern is a user-fixable error."""
    try:
        return re.compile(pattern, _REGEX_FLAGS)
    except re.error as exc:
        raise WinnowError(f"gold answer {pattern!r} is not a valid regular expression: {exc}",
                          "fix the pattern or drop \"answer_type\": \"regex\" from the question's metadata") from exc


def _regex_full_match(prediction: str, pattern: str) -> bool:
    compiled = compile_answer_regex(pattern)
    # A model often ends its answer with a full stop or wraps it in quotes; EM should not hinge on that.
    stripped = prediction.strip().strip(string.punctuation + " ")
    return any(compiled.fullmatch(candidate) is not None
               for candidate in (prediction.strip(), stripped, normalize_answer(prediction)))


def exact_match(prediction: str, answers: Sequence[str] | str, *, regex: bool = False) -> float:
    """1.0 when the normalised prediction equals a normalised gold answer (or fully matches a regex)."""
    answers = _check_answers(answers)
    if regex:
        return float(any(_regex_full_match(prediction, pattern) for pattern in answers))
    predicted = normalize_answer(prediction)
    return float(any(predicted == normalize_answer(gold) for gold in answers))


def _f1(predicted_tokens: list[str], gold_tokens: list[str]) -> float:
    if not predicted_tokens or not gold_tokens:
        # SQuAD v2's rule: two empty answers agree; one empty answer shares nothing.
        return float(predicted_tokens == gold_tokens)
    common = Counter(predicted_tokens) & Counter(gold_tokens)
    overlap = sum(common.values())
    if overlap == 0:
        return 0.0
    precision = overlap / len(predicted_tokens)
    recall = overlap / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def token_f1(prediction: str, answers: Sequence[str] | str, *, regex: bool = False) -> float:
    """Best SQuAD token F1 over the gold answers (bag of normalised words)."""
    answers = _check_answers(answers)
    if regex:
        return exact_match(prediction, answers, regex=True)
    predicted_tokens = normalize_answer(prediction).split()
    return max((_f1(predicted_tokens, normalize_answer(gold).split()) for gold in answers), default=0.0)


def accuracy(prediction: str, answers: Sequence[str] | str, *, regex: bool = False) -> float:
    """1.0 when the generation contains a gold answer (PopQA/TriviaQA "Acc.", RankRAG Table 2).

    Gold answers that normalise to nothing (an answer of just "The") are ignored, since the empty
    string is contained in every generation.
    """
    answers = _check_answers(answers)
    if regex:
        text = unicodedata.normalize("NFD", prediction)
        return float(any(compile_answer_regex(p).search(text) is not None for p in answers))
    predicted = normalize_answer(prediction)
    for gold in answers:
        normalised = normalize_answer(gold)
        if normalised and normalised in predicted:
            return 1.0
    return 0.0


# --- DPR's SimpleTokenizer, built from the Unicode tables of this Python ---------------------------

def _ranges(predicate: Callable[[str], bool]) -> str:
    """A regex character-class body covering every code point whose category passes ``predicate``."""
    parts: list[str] = []
    start = None
    for code in range(sys.maxunicode + 2):
        inside = code <= sys.maxunicode and predicate(unicodedata.category(chr(code)))
        if inside and start is None:
            start = code
        elif not inside and start is not None:
            end = code - 1
            parts.append(re.escape(chr(start)) if start == end
                         else f"{re.escape(chr(start))}-{re.escape(chr(end))}")
            start = None
    return "".join(parts)


@lru_cache(maxsize=1)
def _dpr_token_pattern() -> re.Pattern[str]:
    # DPR: regex r'[\p{L}\p{N}\p{M}]+|[^\p{Z}\p{C}]'. Python's re has no \p{..}, so the classes are
    # spelled out once from unicodedata (about 0.3 s, cached for the process).
    word = _ranges(lambda cat: cat[0] in "LNM")
    not_space_or_control = _ranges(lambda cat: cat[0] in "ZC")
    return re.compile(f"[{word}]+|[^{not_space_or_control}]")


def dpr_tokens(text: str) -> list[str]:
    """DPR's uncased simple tokens of NFD-normalised ``text``."""
    return list(_cached_dpr_tokens(text))


@lru_cache(maxsize=4096)
def _cached_dpr_tokens(text: str) -> tuple[str, ...]:
    # A question's passages are matched once per stage that lists them (first stage, rerank, final):
    # remembered, each is tokenised once (a fifth of `winnow eval`'s CPU against a fast server).
    return tuple(token.lower() for token in _dpr_token_pattern().findall(unicodedata.normalize("NFD", text)))


def _contains_sequence(tokens: Sequence[str], needle: Sequence[str]) -> bool:
    size = len(needle)
    if size == 0:
        return False
    first, wanted = needle[0], tuple(needle)
    for start in range(len(tokens) - size + 1):
        if tokens[start] == first and tuple(tokens[start:start + size]) == wanted:
            return True
    return False


class AnswerMatcher:
    """``has_answer`` for many passages against one question's answers, answers tokenised once."""

    def __init__(self, answers: Sequence[str] | str, *, regex: bool = False) -> None:
        answers = _check_answers(answers)
        self.regex = regex
        if regex:
            self._patterns = [compile_answer_regex(p) for p in answers]
        else:
            # Answers with no tokens (pure punctuation is still a token; only blanks are empty)
            # can never be found, as in DPR.
            self._token_answers = [t for t in (dpr_tokens(a) for a in answers) if t]

    def __call__(self, text: str) -> bool:
        if self.regex:
            normalised = unicodedata.normalize("NFD", text)
            return any(p.search(normalised) is not None for p in self._patterns)
        if not self._token_answers:
            return False
        tokens = _cached_dpr_tokens(text)
        return any(_contains_sequence(tokens, answer) for answer in self._token_answers)


def has_answer(text: str, answers: Sequence[str] | str, regex: bool = False) -> bool:
    """DPR's test of whether ``text`` (a passage) holds one of ``answers``; see the module notes."""
    return AnswerMatcher(answers, regex=regex)(text)


def mean(values: Iterable[float]) -> float:
    """Arithmetic mean, 0.0 for no values (an empty run scores nothing rather than failing)."""
    values = list(values)
    return sum(values) / len(values) if values else 0.0
