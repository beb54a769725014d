"""Answer metrics: Exact Match, token F1, Accuracy and DPR's ``has_answer``.

* **Exact Match** and **token F1** use SQuAD v1.1's answer normalisation (lower-case, drop
  punctuation, drop the articles *a/an/the*, collapse white space) and take the best score over the
  gold answers. RankRAG §5.1 ("Evaluation Metrics") reports EM as the main OpenQA metric and F1 for
  multi-hop sets.
* **Accuracy** is the PopQA/TriviaQA convention RankRAG §5.1 and Table 2 report beside EM (after
  Mallen et al. 2023 and Asai et al. 2024): a generation is correct when it *contains* a gold
  answer. Containment is tested on SQuAD-normalised text, as FlashRAG's ``acc`` does, so "The
  Beatles." contains "beatles". The tests the papers cite are recorded beside it: Self-RAG's
  ``match`` (:func:`match_accuracy`, raw and case-sensitive, which RankRAG and MAIN-RAG cite) as
  ``accuracy_match`` and PopQA's (:func:`popqa_accuracy`, raw, lower-cased or capitalised) as
  ``accuracy_popqa``.
* **FEVER's label accuracy** (RankRAG Table 2, FEVER column): when the gold answers are truth
  labels ("True" / "False", D.2's "Answer … with True or False"; Winnow's KILT loader maps SUPPORTS
  / REFUTES to them), a generation is correct when the label it *states* is the gold one
  (:func:`stated_label`), not when the gold word is a substring of it: "untrue" states no label.
* **Multiple-choice accuracy** (MAIN-RAG's ARC-Challenge; RankRAG Table 5, MIRAGE): the question's
  ``choices`` (letter → option) are in its metadata and the gold answer is a letter; the chosen
  letter is read from the generation by MIRAGE's released ``locate_answer`` rules
  (:func:`chosen_letter`), the first option's letter when none matches, as that code does.
* **str-em** (ASQA, ALCE's ``compute_str_em``): the share of the question's disambiguated
  sub-questions one of whose short answers is a substring of the SQuAD-normalised generation.
* **ROUGE-L** (ASQA): ``rougeLsum`` F-measure of Google's ``rouge-score`` package (the
  implementation ALCE and ASQA use: Porter stemming, one sentence a line, lower-cased), the best
  over the question's long answers; needs the 'eval' extra.
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

import json
import re
import string
import sys
import threading
import unicodedata
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

from .errors import WinnowError
from .extras import import_extra

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
    string is contained in every generation. Gold truth labels (FEVER's "True" / "False") are scored
    by :func:`label_accuracy` instead: "untrue" does not contain the label "True".
    """
    answers = _check_answers(answers)
    if is_label_answer(answers) and not regex:
        return label_accuracy(prediction, answers)
    if regex:
        text = unicodedata.normalize("NFD", prediction)
        return float(any(compile_answer_regex(p).search(text) is not None for p in answers))
    predicted = normalize_answer(prediction)
    for gold in answers:
        normalised = normalize_answer(gold)
        if normalised and normalised in predicted:
            return 1.0
    return 0.0


def match_accuracy(prediction: str, answers: Sequence[str] | str) -> float:
    """Self-RAG's ``match`` (Asai et al. 2024, ``metrics.py``), the accuracy RankRAG §5.1 and MAIN-RAG
    §4.1 cite: 1.0 when a gold answer is a substring of the raw generation, case and punctuation as
    they are. "paris" does not match gold "Paris"; "US" does not match "U.S."."""
    return float(any(gold in prediction for gold in _check_answers(answers)))


def popqa_accuracy(prediction: str, answers: Sequence[str] | str) -> float:
    """PopQA's accuracy (Mallen et al. 2023, ``run_model.py``): a gold answer, as written, lower-cased
    or capitalised, is a substring of the raw generation."""
    return float(any(gold in prediction or gold.lower() in prediction or gold.capitalize() in prediction
                     for gold in _check_answers(answers)))


# --- FEVER's truth labels ----------------------------------------------------------------------------

#: Words that state a truth label. KILT's own label names count too, for a model that echoes them.
_LABEL_WORDS = {"true": "true", "false": "false", "supports": "true", "supported": "true",
                "refutes": "false", "refuted": "false"}
_LABELS = frozenset({"true", "false"})
#: A label word right after one of these states the other label: "It is not true" states false.
#: (SQuAD normalisation has dropped the apostrophe: "isn't" is "isnt".)
_NEGATIONS = frozenset({"not", "isnt", "never", "arent", "wasnt", "nor"})


def is_label_answer(answers: Sequence[str] | str) -> bool:
    """The gold answers are FEVER truth labels: every one is "True" or "False" (any case)."""
    answers = _check_answers(answers)
    return bool(answers) and all(normalize_answer(a) in _LABELS for a in answers)


def stated_label(prediction: str) -> str | None:
    """The truth label a generation states ("true" / "false"), or ``None`` when it states none or both.

    The first word decides when it is a label word ("False. The film was…"); otherwise the one kind
    of label word that appears among the words ("The claim is true."), a label word right after a
    negation stating the other ("It is not true" states false). Words, not substrings: "untrue" and
    "falsehood" state nothing.
    """
    words = normalize_answer(prediction).split()
    if words and words[0] in _LABEL_WORDS:
        return _LABEL_WORDS[words[0]]
    found = {_negated(_LABEL_WORDS[word]) if position and words[position - 1] in _NEGATIONS else _LABEL_WORDS[word]
             for position, word in enumerate(words) if word in _LABEL_WORDS}
    return found.pop() if len(found) == 1 else None


def _negated(label: str) -> str:
    return "false" if label == "true" else "true"


def label_accuracy(prediction: str, answers: Sequence[str] | str) -> float:
    """1.0 when the label the generation states is a gold label (FEVER accuracy)."""
    label = stated_label(prediction)
    return float(label is not None and label in {normalize_answer(a) for a in _check_answers(answers)})


# --- multiple choice (ARC-Challenge, MIRAGE) -----------------------------------------------------------

def chosen_letter(prediction: str, letters: Sequence[str]) -> str:
    """The option letter a generation chooses, by MIRAGE's released ``locate_answer`` rules (its
    ``src/utils.py``), with the question's own letters in place of its fixed A-D.

    MedRAG asks for JSON, so text after the last ``"answer_choice": "`` is read when present. Then,
    first match wins: the letter alone; the letter at the start followed by " or", " and", "/" or
    ","; "Option X" / "option X" anywhere; ": X" anywhere; the letter at the start followed by ".",
    a double quote or ":". Letter options are read among A-D and the question's own letters, as
    MIRAGE reads A-D for every set (so "D" for a three-option question is read, and is wrong). When
    nothing matches, the first letter: MIRAGE's code answers "A" then, and the accuracy it reports
    includes those guesses.
    """
    if not letters:
        raise ValueError("a multiple-choice question needs at least one choice")
    marker = '"answer_choice": "'
    sentence = prediction.split(marker)[-1].strip()
    readable = list(letters)
    if all(len(letter) == 1 and letter.isupper() for letter in letters):
        # MIRAGE reads A-D whatever the options: a "D" chosen for a yes/no/maybe question is read, and wrong.
        readable = list(dict.fromkeys([*letters, "A", "B", "C", "D"]))
    group = "(" + "|".join(re.escape(letter) for letter in readable) + ")"
    # re.match anchors at the start like MIRAGE's "^\s*"; re.search for its unanchored rules.
    rules = [(re.match, rf"\s*{group}$"), (re.match, rf"\s*{group} or"), (re.match, rf"\s*{group} and"),
             (re.match, rf"\s*{group}/"), (re.match, rf"\s*{group},"), (re.search, rf"[Oo]ption {group}"),
             (re.search, rf":\s*{group}"), (re.match, rf"\s*{group}\."), (re.match, rf'\s*{group}"'),
             (re.match, rf"\s*{group}:")]
    for find, pattern in rules:
        found = find(pattern, sentence)
        if found is not None:
            return found.group(1)
    return letters[0]


def choice_accuracy(prediction: str, answers: Sequence[str] | str, choices: Sequence[str]) -> float:
    """1.0 when the letter the generation chooses (:func:`chosen_letter`) is the gold letter."""
    return float(chosen_letter(prediction, list(choices)) in set(_check_answers(answers)))


# --- ASQA ---------------------------------------------------------------------------------------------

def str_em(prediction: str, answer_groups: Sequence[Sequence[str]]) -> float:
    """ASQA's str-em (ALCE's ``compute_str_em``): the share of the sub-questions (``answer_groups``,
    one list of short answers each) with a short answer inside the SQuAD-normalised generation."""
    if not answer_groups:
        return 0.0
    predicted = normalize_answer(prediction)
    return mean(float(any(normalize_answer(a) in predicted for a in group)) for group in answer_groups)


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def _sentence_lines(text: str) -> str:
    # rougeLsum reads one sentence a line. ALCE splits with NLTK's punkt model, which would be a
    # download; a split after ., ! or ? and white space differs only around abbreviations.
    return "\n".join(part for part in _SENTENCE_END.split(text.lower().strip()) if part)


@lru_cache(maxsize=1)
def _rouge_scorer() -> Any:  # rouge_score.rouge_scorer.RougeScorer (the package ships no types)
    rouge_scorer = import_extra("rouge_score.rouge_scorer", "eval", "ROUGE-L (ASQA long answers)")
    return rouge_scorer.RougeScorer(["rougeLsum"], use_stemmer=True)


def rouge_l(prediction: str, references: Sequence[str]) -> float:
    """ROUGE-L (``rougeLsum`` F-measure, stemmed) of the generation, the best over ``references``."""
    if not references:
        return 0.0
    scorer = _rouge_scorer()
    hypothesis = _sentence_lines(prediction)
    return max(float(scorer.score(_sentence_lines(ref), hypothesis)["rougeLsum"].fmeasure) for ref in references)


# --- DPR's SimpleTokenizer, built from the Unicode tables of this Python ---------------------------

#: DPR's two character classes, per Unicode version of ``unicodedata``, as
#: :func:`build_token_classes` gives them (written by ``tools/dpr_token_classes.py`` under each
#: Python Winnow supports; tests/test_evaluation.py checks the running one's). Building them takes
#: about 0.35 s, a tenth of a short ``winnow eval`` against a fast server.
TOKEN_CLASSES_FILE = Path(__file__).with_name("dpr_token_classes.json")


def _class_body(first_letters: str, wanted: str) -> str:
    """A regex character-class body of the code points whose category's first letter is in
    ``wanted`` (``first_letters`` holds one such letter per code point)."""
    parts = []
    for run in re.finditer(f"[{wanted}]+", first_letters):
        start, end = run.start(), run.end() - 1
        parts.append(re.escape(chr(start)) if start == end else f"{re.escape(chr(start))}-{re.escape(chr(end))}")
    return "".join(parts)


def build_token_classes() -> tuple[str, str]:
    """DPR's classes from this Python's ``unicodedata``: letters, digits and marks
    (``\\p{L}\\p{N}\\p{M}``), and separators and control characters (``\\p{Z}\\p{C}``)."""
    first_letters = "".join([category[0] for category in map(unicodedata.category,
                                                              map(chr, range(sys.maxunicode + 1)))])
    return _class_body(first_letters, "LNM"), _class_body(first_letters, "ZC")


def _token_classes() -> tuple[str, str]:
    try:
        stored = json.loads(TOKEN_CLASSES_FILE.read_text("utf-8")).get(unicodedata.unidata_version)
    except (OSError, ValueError):
        stored = None
    return (stored[0], stored[1]) if stored else build_token_classes()


_PATTERN: list[re.Pattern[str]] = []
_PATTERN_LOCK = threading.Lock()


def _dpr_token_pattern() -> re.Pattern[str]:
    # DPR: regex r'[\p{L}\p{N}\p{M}]+|[^\p{Z}\p{C}]'. Python's re has no \p{..}, so the classes are
    # spelled out from unicodedata (stored per Unicode version, else built). Under a lock: the
    # questions of `winnow eval` against a server are scored on many threads at once.
    if not _PATTERN:
        with _PATTERN_LOCK:
            if not _PATTERN:
                word, space_or_control = _token_classes()
                _PATTERN.append(re.compile(f"[{word}]+|[^{space_or_control}]"))
    return _PATTERN[0]


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


def _sigma_free(text: str) -> str:
    return text.replace("\u03c2", "\u03c3")  # final sigma -> sigma


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
            self._needles = [[_sigma_free(token) for token in answer] for answer in self._token_answers]

    def __call__(self, text: str) -> bool:
        if self.regex:
            normalised = unicodedata.normalize("NFD", text)
            return any(p.search(normalised) is not None for p in self._patterns)
        if not self._token_answers or not self._may_hold(text):
            return False
        tokens = _cached_dpr_tokens(text)
        return any(_contains_sequence(tokens, answer) for answer in self._token_answers)

    def _may_hold(self, text: str) -> bool:
        """False only when no answer can be in ``text``: some token of every answer is not even a
        substring of it. Most passages fail this cheap test and are never tokenised (tokenising
        was three quarters of a question's scoring against a fast server); the answer is the same.

        A token is a piece of the NFD text, lower-cased on its own, so it is a substring of the
        lower-cased NFD text, except that ``str.lower`` picks a final or medial sigma from the
        letters around it: both sides are compared with every sigma made medial.
        """
        haystack = _sigma_free(unicodedata.normalize("NFD", text).lower())
        return any(all(token in haystack for token in needle) for needle in self._needles)


def has_answer(text: str, answers: Sequence[str] | str, regex: bool = False) -> bool:
    """DPR's test of whether ``text`` (a passage) holds one of ``answers``; see the module notes."""
    return AnswerMatcher(answers, regex=regex)(text)


#: Keys of a question's ``metadata`` the answer metrics read (the dataset loaders write them).
CHOICES = "choices"  # {"A": "option text", ...}: a multiple-choice question; the gold answer is a letter
QA_PAIRS = "qa_pairs"  # [["short answer", "alias"], ...]: ASQA's sub-questions, for str-em
LONG_ANSWERS = "long_answers"  # ["long answer", ...]: ASQA's annotations, for ROUGE-L


def answer_scores(prediction: str, answers: Sequence[str], *, regex: bool = False,
                  metadata: Mapping[str, Any] | None = None) -> dict[str, float]:
    """A generation's scores against one question: ``em``, ``f1`` and ``accuracy`` always (accuracy
    by the question's kind: chosen letter, stated label or containment), ``str_em`` and ``rouge_l``
    for a question whose metadata has ASQA's sub-questions and long answers."""
    metadata = metadata or {}
    choices = metadata.get(CHOICES)
    if choices:
        correct = choice_accuracy(prediction, answers, list(choices))
    else:
        correct = accuracy(prediction, answers, regex=regex)
    scores = {"em": exact_match(prediction, answers, regex=regex),
              "f1": round(token_f1(prediction, answers, regex=regex), 6),
              "accuracy": correct}
    if not choices and not regex and not is_label_answer(answers):
        # The containment tests the papers cite, beside Winnow's normalised one (docs/reproducing.md).
        scores["accuracy_match"] = match_accuracy(prediction, answers)
        scores["accuracy_popqa"] = popqa_accuracy(prediction, answers)
    if metadata.get(QA_PAIRS):
        scores["str_em"] = round(str_em(prediction, metadata[QA_PAIRS]), 6)
    if metadata.get(LONG_ANSWERS):
        scores["rouge_l"] = round(rouge_l(prediction, metadata[LONG_ANSWERS]), 6)
    return scores


def mean(values: Iterable[float]) -> float:
    """Arithmetic mean, 0.0 for no values (an empty run scores nothing rather than failing)."""
    values = list(values)
    return sum(values) / len(values) if values else 0.0
