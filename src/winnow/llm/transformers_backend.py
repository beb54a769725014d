"""A backend that runs a model with Hugging Face transformers: the way to use a fine-tuned model.

``winnow train sft`` writes a LoRA adapter or full weights; this backend loads them (on their base
model, the adapter merged in) so the tuned model runs in every method and in ``winnow eval``:
``--backend transformers --model RUN_DIR``. It also loads Hugging Face model folders and, dequantised,
any GGUF model Winnow knows (see :mod:`winnow.models.loading`).

Chat prompts are rendered with the tokenizer's own chat template, as in training, with the
generation prompt added (or, when the last turn is a prefilled assistant turn, continued); a plain
prompt (the ``plain`` framing) is tokenized as it is, no template applied. Choice scores are
exact: the next-token distribution is computed over the whole vocabulary, every token whose text is
a spelling of a choice ("True", " true", ...) is summed into it, and the choices are renormalised
(RankRAG §4.3's P("True")), through the same :func:`~winnow.llm.choices.scores_over_choices` as the
other backends. Decoding is greedy at temperature 0, so answers are a function of the prompt and the
model's sha256 (the identity the call cache keys on).
"""

from __future__ import annotations

import time
from typing import Any, Sequence

from ..errors import BackendError
from ..extras import require
from .base import ChoiceScores, Generation
from .choices import normalise_token, raw_choice_logprobs, scores_over_choices
from .context_size import resolve_context_size
from .hf_tokens import TokenizerIds
from .messages import Prompt
from .tokens import ModelTokens, TokenCounter

RAW_TOP = 10  # next-token alternatives kept in the trace


class TransformersBackend:
    """One causal LM in this process (CPU, or the first GPU when there is one)."""

    def __init__(self, model: str, *, dtype: str = "float32", threads: int | None = None,
                 batch_size: int | None = None, context_size: int | None = None) -> None:
        from ..models.loading import load_model, locate_model

        require("train", "the transformers backend (--backend transformers)")
        import torch

        if threads:
            torch.set_num_threads(threads)
        self._torch = torch
        self._source = locate_model(model)
        self._dtype = dtype
        self._model, self._tokenizer = load_model(self._source, dtype=dtype)
        self._device = "cuda" if torch.cuda.is_available() else "cpu"
        self._model.to(self._device).eval()
        self._tokenizer.padding_side = "left"  # the next token of every row sits at the last position
        # On a CPU a batch costs as much per prompt as one prompt alone (measured), and padding
        # only adds work; on a GPU batches pay.
        self.batch_size = batch_size or (8 if self._device == "cuda" else 1)
        self._vocab_text: list[str] | None = None
        self._choice_ids: dict[tuple[str, ...], dict[str, list[int]]] = {}
        trained = getattr(self._model.config, "max_position_embeddings", None)
        self.context_size, self.context_size_source = resolve_context_size(
            context_size, trained if isinstance(trained, int) and trained > 0 else None,
            "the model's max_position_embeddings")
        self._ids = TokenizerIds(self._tokenizer)
        self.tokens: TokenCounter = ModelTokens(self._ids, "exact: the model's transformers tokenizer")

    @property
    def identity(self) -> dict[str, Any]:
        return {"backend": "transformers", "model": self._source.name, "sha256": self._source.sha256,
                "dtype": self._dtype}

    @property
    def source(self) -> Any:
        return self._source

    def token_ids(self, messages: Prompt) -> list[int]:
        """The prompt's tokens (:meth:`TokenizerIds.token_ids`)."""
        return self._ids.token_ids(messages)

    def encode(self, text: str) -> list[int]:
        return self._ids.encode(text)

    def _padded(self, rows: list[list[int]]) -> tuple[Any, Any]:
        width = max(len(r) for r in rows)
        pad = self._tokenizer.pad_token_id
        ids = [[pad] * (width - len(r)) + r for r in rows]
        mask = [[0] * (width - len(r)) + [1] * len(r) for r in rows]
        tensor = self._torch.tensor
        return tensor(ids, device=self._device), tensor(mask, device=self._device)

    def _next_token_logprobs(self, rows: list[list[int]]) -> Any:
        ids, mask = self._padded(rows)
        with self._torch.inference_mode():
            logits = self._model(input_ids=ids, attention_mask=mask, logits_to_keep=1).logits[:, -1, :]
        return self._torch.log_softmax(logits.float(), dim=-1).cpu()

    def _ids_for(self, choices: Sequence[str]) -> dict[str, list[int]]:
        """Every vocabulary id whose text spells each choice (computed once per choice set)."""
        key = tuple(choices)
        if key not in self._choice_ids:
            if self._vocab_text is None:
                tokens = self._tokenizer.convert_ids_to_tokens(list(range(len(self._tokenizer))))
                self._vocab_text = [normalise_token(t or "") for t in tokens]
            wanted = {normalise_token(c): c for c in choices}
            found: dict[str, list[int]] = {c: [] for c in choices}
            for token_id, text in enumerate(self._vocab_text):
                if text in wanted:
                    found[wanted[text]].append(token_id)
            self._choice_ids[key] = found
        return self._choice_ids[key]

    def choice_logprobs(self, prompts: Sequence[Prompt], choices: Sequence[str]) -> list[ChoiceScores]:
        ids_by_choice = self._ids_for(choices)
        results = []
        for start in range(0, len(prompts), self.batch_size):
            started = time.perf_counter()
            rows = [self.token_ids(m) for m in prompts[start:start + self.batch_size]]
            logprobs = self._next_token_logprobs(rows)
            seconds = (time.perf_counter() - started) / len(rows)
            for row, dist in zip(rows, logprobs, strict=True):
                if not bool(self._torch.isfinite(dist).all()):
                    # Broken weights or an overflow in float16 give NaN logits; a NaN score would
                    # silently sort anywhere, so it is refused like a server's NaN.
                    raise BackendError(f"transformers ({self._source.name}) computed non-finite next-token "
                                       "log-probabilities",
                                       "check the model: a fine-tuning run that diverged leaves NaN weights")
                spelled = [(self._tokenizer.convert_ids_to_tokens(i), float(dist[i]))
                           for ids in ids_by_choice.values() for i in ids]
                top_values, top_ids = dist.topk(RAW_TOP)
                top = [(self._tokenizer.decode([int(i)]), float(v)) for v, i in zip(top_values, top_ids, strict=True)]
                scores, missing = scores_over_choices(spelled or top, choices)
                raw = raw_choice_logprobs(spelled or top, choices)[0]
                results.append(ChoiceScores(scores, len(row), seconds, missing, raw_top=dict(top), raw_logprobs=raw))
        return results

    def generate(self, prompts: Sequence[Prompt], *, max_tokens: int, temperature: float = 0.0,
                 stop: Sequence[str] = ()) -> list[Generation]:
        torch = self._torch
        eos = {self._tokenizer.eos_token_id}
        configured = self._model.generation_config.eos_token_id
        eos.update(configured if isinstance(configured, list) else [configured] if configured is not None else [])
        eos.discard(None)
        results = []
        for start in range(0, len(prompts), self.batch_size):
            started = time.perf_counter()
            rows = [self.token_ids(m) for m in prompts[start:start + self.batch_size]]
            ids, mask = self._padded(rows)
            sampling = {"do_sample": True, "temperature": temperature} if temperature > 0 else {"do_sample": False}
            if temperature > 0:
                torch.manual_seed(0)
            with torch.inference_mode():
                output = self._model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=max_tokens,
                                              pad_token_id=self._tokenizer.pad_token_id, eos_token_id=sorted(eos),
                                              top_p=None, top_k=None, **sampling)
            seconds = (time.perf_counter() - started) / len(rows)
            for row, generated in zip(rows, output[:, ids.shape[1]:].tolist(), strict=True):
                results.append(self._finish(row, generated, eos, stop, max_tokens, seconds))
        return results

    def _finish(self, row: list[int], generated: list[int], eos: set[int], stop: Sequence[str], max_tokens: int,
                seconds: float) -> Generation:
        end = next((i for i, t in enumerate(generated) if t in eos), None)
        tokens = generated if end is None else generated[:end]
        text = self._tokenizer.decode(tokens, skip_special_tokens=True)
        reason = "stop" if end is not None else "length"
        cuts = [text.find(s) for s in stop if s and s in text]
        if cuts:
            text, reason = text[:min(cuts)], "stop"
        used = len(tokens) + (1 if end is not None else 0)
        return Generation(text.strip(), len(row), min(used, max_tokens), seconds, reason)

    def close(self) -> None:
        self._model = None
