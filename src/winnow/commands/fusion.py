"""``winnow fit-fusion``: fit calibrated fusion's weights on a run, print them or write a run file."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from .common import JsonOption, app, err, out


def fusion_toml(weights: tuple[float, float, float], *, method: str, source: str, fitted_on: str) -> str:
    """A TOML run file holding the weights under ``[method]`` (``--config FILE`` reads it)."""
    values = ", ".join(repr(w) for w in weights)
    return (f"# Calibrated fusion fitted by `winnow fit-fusion` on {source} ({fitted_on}).\n"
            "# [w_llm, w_first, bias]: P(relevant) = sigmoid(w_llm * reranker + w_first * min-max(first) + bias)\n"
            f"method = {method!r}\n\n[{method}]\nfusion_weights = [{values}]\n")


@app.command(name="fit-fusion")
def fit_fusion_command(
    run_dir: Annotated[Path, typer.Argument(help="A run folder made by `winnow eval` (rankrag, or rankgpt with "
                                                 "rerank=pointwise) on tuning questions.")],
    qrels: Annotated[Optional[Path], typer.Option("--qrels", help="TREC qrels: a passage is relevant when judged "
                                                                  "above 0 (default: when it holds a gold answer).")
                     ] = None,
    reranker: Annotated[str, typer.Option("--reranker", help="The stage whose scores are fused (as answers.jsonl "
                                                             "names it).")] = "rerank",
    l2: Annotated[float, typer.Option("--l2", min=0.0, help="L2 penalty on the two weights, per passage.")] = 1e-3,
    out_file: Annotated[Optional[Path], typer.Option("--out", "-o", help="Write a TOML run file holding "
                                                                         "fusion_weights (for --config).")] = None,
    as_json: JsonOption = False,
) -> None:
    """Fit calibrated fusion (a logistic model of relevance on the LLM's and the first stage's scores) on
    a run's passages; prints fusion_weights = [w_llm, w_first, bias] (not the papers' method)."""
    from ..atomic import write_text
    from ..datasets import read_qrels
    from ..evaluation.fusion_fit import fit_fusion
    from ..evaluation.runfolder import RunFolder

    fit, examples = fit_fusion(run_dir, reranker=reranker, qrels=read_qrels(qrels) if qrels else None, l2=l2)
    config = RunFolder(run_dir).read_config() or {}
    method = str(config.get("identity", {}).get("method", "rankrag"))
    fitted_on = f"{fit.questions} questions, {fit.passages} passages, {fit.relevant} relevant by " + (
        f"qrels {qrels.name}" if qrels else "gold answer")
    if out_file is not None:
        write_text(out_file, fusion_toml(fit.weights, method=method, source=str(run_dir), fitted_on=fitted_on))
    if as_json:
        out.print_json(data={**fit.to_dict(), "left_out": examples.left_out,
                             **({"written": str(out_file)} if out_file else {})})
        return
    out.print(f"fusion_weights = [{', '.join(repr(w) for w in fit.weights)}]", highlight=False)
    err.print(f"fitted on {fitted_on}; log loss {fit.log_loss:.4f}"
              + (f"; {len(examples.left_out)} question(s) left out: {next(iter(examples.left_out.values()))}"
                 if examples.left_out else "")
              + (f"; wrote {out_file}" if out_file else ""), highlight=False)
