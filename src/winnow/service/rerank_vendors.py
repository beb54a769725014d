"""The request and response shapes of hosted rerank APIs, translated to and from Winnow's rerank plan.

Each vendor's official client, pointed at a Winnow server as its base URL, reranks with Winnow's
model. Where the paths are (and the rule when two shapes share one):

=====================  ===========================  ==================================================
client                 path                         shape
=====================  ===========================  ==================================================
Cohere v1, Jina        ``POST /v1/rerank``          Winnow's own: ``{query, documents, top_n,
                                                    return_documents}`` → ``{id, results: [{index,
                                                    relevance_score, document?}], usage, meta}``
Voyage                 ``POST /v1/rerank``          a body with ``top_k`` or ``truncation`` (names only
                                                    Voyage uses) → ``{object: "list", data: [{index,
                                                    relevance_score, document?}], model, usage}``
Cohere v2              ``POST /v2/rerank``          Winnow's own (v2's results are a subset of it);
                                                    ``relevant_spans`` enabled is refused (422)
Hugging Face TEI       ``POST /rerank``             ``{query, texts, raw_scores?, return_text?}`` →
                                                    ``[{index, score, text?}]``, best first
=====================  ===========================  ==================================================

Every shape also takes Winnow's ``method`` (pointwise, graded, listwise, embedding, cross-encoder,
monot5). A field
a vendor shape cannot honour is refused naming it; each refusal names the vendor's field
(``top_k``, ``texts[2]``), not the Winnow field it became. Winnow cuts a document too long for its
model's context to fit whatever ``truncation``/``truncate`` say (the trace records what was cut).
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import replace
from typing import Any, Iterator, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictStr

from .engine import Plan, Service
from .limits import ApiError, check_range, invalid
from .schemas import RerankRequest

#: The fields of a /v1/rerank body that only Voyage's shape has: one of them picks Voyage's answer.
VOYAGE_FIELDS = frozenset({"top_k", "truncation"})


@contextmanager
def vendor_fields(renamed: dict[str, str]) -> Iterator[None]:
    """Refusals from the Winnow plan name the vendor's field: ``documents[2]`` -> ``texts[2]``."""
    try:
        yield
    except ApiError as exc:
        for ours, theirs in renamed.items():
            if exc.field is not None and (exc.field == ours or exc.field.startswith((f"{ours}[", f"{ours}."))):
                exc.field = theirs + exc.field[len(ours):]
                exc.message = exc.message.replace(ours, theirs)
        raise


# ---- Voyage -------------------------------------------------------------------------------------

class VoyageRerankResult(BaseModel):
    index: int
    relevance_score: float
    document: Optional[str] = None


class VoyageRerankResponse(BaseModel):
    object: Literal["list"] = "list"
    data: list[VoyageRerankResult] = Field(description="Best first; the top_k best when top_k is given.")
    model: str
    usage: dict[str, int] = Field(description="total_tokens: the prompt and completion tokens of the LLM calls.")


def voyage_plan(service: Service, request: RerankRequest) -> Plan:
    """The plan of a /v1/rerank body in Voyage's shape: ``top_k`` is how many to return,
    ``truncation`` is accepted (Winnow always fits a long document to its model)."""
    if request.top_k is not None and request.top_n is not None:
        raise invalid("top_k", f"top_k is {request.top_k} and top_n is {request.top_n}: give one (top_k is "
                               f"Voyage's name, top_n Cohere's and Jina's)")
    if request.top_k is not None:
        check_range("top_k", request.top_k, 1, service.limits.max_documents)
    plan = service.plan_rerank(request.model_copy(update={"top_n": request.top_k}))
    winnow_shape = plan.shape

    def shape(payload: dict[str, Any]) -> dict[str, Any]:
        body = winnow_shape(payload)
        data = [{"index": r["index"], "relevance_score": r["relevance_score"],
                 **({"document": r["document"]["text"]} if "document" in r else {})} for r in body["results"]]
        return {"object": "list", "data": data, "model": body["model"],
                "usage": {"total_tokens": body["usage"]["total_tokens"]},
                **{k: v for k, v in body.items() if k in ("id", "trace_id", "served_from", "seconds", "meta", "trace")}}

    return replace(plan, shape=shape)


# ---- Cohere v2 ----------------------------------------------------------------------------------

class RelevantSpans(BaseModel):
    """Cohere v2's ``relevant_spans``, as far as Winnow can honour it: turned off."""

    model_config = ConfigDict(extra="forbid")

    mode: Literal["disabled"] = "disabled"


class CohereV2RerankRequest(RerankRequest):
    """A /v2/rerank body, planned as Winnow's own, with Cohere v2's ``relevant_spans`` stated in the
    schema as what is accepted (absent, null or mode "disabled"): any other field or value would be
    accepted and ignored, so it is refused naming the field (``relevant_spans.mode``, ``.enabled``)."""

    relevant_spans: Optional[RelevantSpans] = Field(
        None, description="Cohere v2's. Winnow scores whole documents and returns no relevant spans: leave it out, "
                          "or give only its mode \"disabled\".")



# ---- Hugging Face Text Embeddings Inference -----------------------------------------------------

class TeiRerankRequest(BaseModel):
    """TEI's ``/rerank`` body. Unknown fields are refused: the answer is a bare list, with nowhere to
    say what was ignored."""

    model_config = ConfigDict(extra="forbid")

    query: StrictStr
    texts: list[StrictStr] = Field(description="The documents, in your first stage's order.")
    raw_scores: StrictBool = Field(False, description="The method's own score (pointwise P(True), graded "
                                                      "E[grade], listwise 1/rank, embedding cosine, a cross-"
                                                      "encoder's logit, monoT5's P(true)) instead "
                                                      "of the relevance in [0, 1].")
    return_text: StrictBool = Field(False, description="Include each text in its result.")
    truncate: Optional[StrictBool] = Field(None, description="Accepted; Winnow always cuts a text too long "
                                                             "for its model to fit.")
    truncation_direction: Optional[Literal["Left", "Right", "left", "right"]] = None
    method: Optional[StrictStr] = Field(None, description="Winnow's: pointwise (default), graded, listwise, "
                                                          "embedding, cross-encoder or monot5.")


class TeiRerankResult(BaseModel):
    index: int
    score: float
    text: Optional[str] = None


def tei_plan(service: Service, request: TeiRerankRequest) -> Plan:
    """The plan of a TEI ``/rerank`` body; its shape answers ``{"ranked": [...]}``, the list TEI returns."""
    with vendor_fields({"documents": "texts"}):
        plan = service.plan_rerank(RerankRequest.model_validate({"query": request.query, "documents": request.texts,
                                                                 "method": request.method}))

    def shape(payload: dict[str, Any]) -> dict[str, Any]:
        ranked = [{"index": r["index"], "score": r["score"] if request.raw_scores else r["relevance_score"],
                   **({"text": request.texts[r["index"]]} if request.return_text else {})}
                  for r in payload["results"]]
        return {"ranked": ranked, "trace_id": payload.get("trace_id", "")}

    return replace(plan, shape=shape)
