"""Prompt templates render exactly as printed in the papers."""

import pytest

from winnow.errors import WinnowError
from winnow.prompts import PromptTemplate, format_passage, prompt
from winnow.records import Passage

SYSTEM = ("This is a chat between a user and an artificial intelligence assistant. The assistant gives "
          "helpful, detailed, and polite answers to the user's questions based on the context. The "
          "assistant should also indicate when the answer cannot be found in the context.")

# RankRAG Appendix D.1, NQ/TriviaQA/HotpotQA/PopQA, with {Passage} and <question> filled in.
PAPER_D1 = (
    f"System: {SYSTEM}\n\n"
    "Passage: {passage}\n\n"
    "User: For the question {question}, access whether the passage is relevant to the question. "
    "Return True if relevant, otherwise False.\n\n"
    "Assistant:"
)

# RankRAG Appendix D.2, NQ/TriviaQA/HotpotQA/PopQA, five reranked passages.
PAPER_D2 = (
    f"System: {SYSTEM}\n\n"
    "Passage 1: {p1}\n\nPassage 2: {p2}\n\nPassage 3: {p3}\n\nPassage 4: {p4}\n\nPassage 5: {p5}\n\n"
    "User: {question}. Answer the above question with a short phrase.\n\n"
    "Assistant:"
)


def passages(n):
    return [Passage(id=f"d{i}", text=f"Text number {i}.") for i in range(1, n + 1)]


def test_context_ranking_prompt_matches_appendix_d1():
    [p] = passages(1)
    rendered = prompt("rankrag.context_ranking").render_plain("who wrote hamlet", [p])
    assert rendered == PAPER_D1.format(passage=p.text, question="who wrote hamlet")


def test_rag_prompt_matches_appendix_d2():
    ps = passages(5)
    rendered = prompt("rankrag.rag").render_plain("who wrote hamlet", ps)
    assert rendered == PAPER_D2.format(**{f"p{i}": p.text for i, p in enumerate(ps, 1)}, question="who wrote hamlet")


def test_rag_prompt_does_not_double_a_question_mark():
    rendered = prompt("rankrag.rag").render_plain("Who wrote Hamlet?", passages(1))
    assert "User: Who wrote Hamlet. Answer the above question" in rendered


def test_chat_messages_put_context_and_instruction_in_the_user_turn():
    template = prompt("rankrag.context_ranking")
    p = Passage(id="x", title="Hamlet", text="Hamlet is a tragedy by William Shakespeare.")
    system, user = template.messages("who wrote hamlet", [p])
    assert system == {"role": "system", "content": SYSTEM}
    assert user["role"] == "user"
    assert user["content"] == ("Passage: Hamlet Hamlet is a tragedy by William Shakespeare.\n\n"
                               "For the question who wrote hamlet, access whether the passage is relevant "
                               "to the question. Return True if relevant, otherwise False.")


def test_passage_without_title_is_its_text():
    assert format_passage(Passage(id="a", text="Just text.")) == "Just text."


def test_unknown_placeholder_is_rejected_with_the_field_named():
    with pytest.raises(WinnowError, match="field 'user' uses unknown placeholders \\['answer'\\]"):
        PromptTemplate(name="bad", source="", system="s", passage="{passage}", user="{question} {answer}")


def test_unknown_prompt_names_the_known_ones():
    with pytest.raises(WinnowError, match="context_ranking"):
        prompt("rankrag.nope")


# RankRAG Appendix C.2 2), retrieval-augmented QA training data, with {Question} filled in with
# Table 1's question x for the task ("Answer the following question from context. {question}").
# The appendix prints the five passages one per line, as it does in C.2 4); the extracted text's
# blank line before "Passage 5" is not in C.2 4) and is read as page layout.
PAPER_C2_RAG_QA = (
    f"System: {SYSTEM}\n\n"
    "Passage 1: {p1}\nPassage 2: {p2}\nPassage 3: {p3}\nPassage 4: {p4}\nPassage 5: {p5}\n\n"
    "User: Answer the following question from context. {question}\n\n"
    "Assistant:"
)

# RankRAG Appendix C.2 4), retrieval-augmented ranking training data.
PAPER_C2_RAG_RANKING = (
    f"System: {SYSTEM}\n\n"
    "Passage 1: {p1}\nPassage 2: {p2}\nPassage 3: {p3}\nPassage 4: {p4}\nPassage 5: {p5}\n\n"
    "User: For the question {question}, access whether the above passages are relevant to the question. "
    "Return all the relevant passage id.\n\n"
    "Assistant:"
)


@pytest.mark.parametrize(("name", "paper"), [("rankrag_train.rag_qa", PAPER_C2_RAG_QA),
                                             ("rankrag_train.rag_ranking", PAPER_C2_RAG_RANKING)])
def test_stage_ii_training_prompts_match_appendix_c2(name, paper):
    ps = passages(5)
    rendered = prompt(name).render_plain("who wrote hamlet", ps)
    assert rendered == paper.format(**{f"p{i}": p.text for i, p in enumerate(ps, 1)}, question="who wrote hamlet")
