"""``winnow index`` and ``winnow search``: build an index from a corpus, search it."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from ..errors import WinnowError
from ..text import check_text
from .common import IndexOption, JsonOption, app, err, out

if TYPE_CHECKING:
    from ..corpus.stream import CorpusStream
    from ..index.encoders import DenseEncoder
    from ..index.ray_encoding import RayEncoding
    from ..index.vectors import Storage


# The options of encoding (`winnow index --dense`, `winnow embed`), declared once.
EncoderOption = Annotated[str, typer.Option("--encoder", help="Dense encoder preset: minilm (packaged, the default), "
                                                              "dpr, contriever, contriever-msmarco, dragon-plus, e5, "
                                                              "bge (from the Hugging Face hub).")]
StorageOption = Annotated[str, typer.Option("--dense-storage", help="float16 (default), int8 or float32.")]
AnnBuildOption = Annotated[Optional[list[str]], typer.Option("--ann", help="Also build an ANN index: hnsw or ivfpq "
                                                                           "(repeatable); exact search stays the "
                                                                           "default.")]
AnnSetOption = Annotated[Optional[list[str]], typer.Option("--ann-set", help="An ANN setting NAME=VALUE: M, "
                                                                             "efConstruction, efSearch (hnsw); nlist, "
                                                                             "m, nbits, nprobe, refine (ivfpq).")]
EngineOption = Annotated[str, typer.Option("--engine", help="Where the passages are embedded: local (this process) "
                                                            "or ray (the embedding shards shared out over the "
                                                            "workers of a Ray cluster, one encoder each; needs the "
                                                            "\\[ray] extra and the index on a filesystem every node "
                                                            "sees).")]
ShardSizeOption = Annotated[Optional[int], typer.Option("--shard-size", min=1, help="Build BM25 in shards of this many "
                                                                      "passages (memory bounded by a shard; a killed "
                                                                      "build resumes from the last finished shard; "
                                                                      "search merges the shards' top k exactly). For "
                                                                      "corpora of millions of passages; 65,536 or "
                                                                      "fewer stores passage rows in 2 bytes, not 4 "
                                                                      "(recommended: 65536).")]
ImpactsOption = Annotated[str, typer.Option("--bm25-impacts", help="How BM25's score arrays store impacts: float32 "
                                                                  "(exact, the default), float16 or uint8 (per-term "
                                                                  "linear steps): smaller, scores rounded "
                                                                  "(docs/benchmarks.md). A matrix of at most 65,536 "
                                                                  "passages (--shard-size 65536) also stores its "
                                                                  "passage rows in 2 bytes.")]
RayAddressOption = Annotated[Optional[str], typer.Option("--ray-address", help="--engine ray: the cluster's "
                                                                               "HOST:PORT (default: RAY_ADDRESS, or "
                                                                               "a new cluster on this machine).")]
RayWorkersOption = Annotated[Optional[int], typer.Option("--ray-workers", help="--engine ray: workers, each with its "
                                                                               "own encoder \\[default: one per "
                                                                               "GPU, else one per "
                                                                               "--ray-cpus-per-worker CPUs].")]
RayCpusOption = Annotated[float, typer.Option("--ray-cpus-per-worker", help="--engine ray: CPUs each worker holds "
                                                                            "(its encoder's threads).")]
RayGpusOption = Annotated[Optional[float], typer.Option("--ray-gpus-per-worker", help="--engine ray: GPUs each "
                                                                                      "worker holds \\[default: 1 "
                                                                                      "where the cluster has one per "
                                                                                      "worker and the encoder runs "
                                                                                      "with torch, else 0].")]


@app.command()
def index(
    source: Annotated[str, typer.Argument(help="A .jsonl(.gz) file, a .tsv(.gz) collection (DPR's psgs_w100.tsv or "
                                               "MS MARCO's collection.tsv), a .parquet file, a BEIR folder, a "
                                               "folder of .txt/.md files, or `wiki-vital` (the 10,033 Wikipedia "
                                               "vital-article summaries).")],
    out_dir: Annotated[Path, typer.Option("--out", "-o", help="Folder to create.")],
    chunk_words: Annotated[int, typer.Option("--chunk-words", help="Passage size for text folders.")] = 150,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace an existing index.")] = False,
    dense: Annotated[bool, typer.Option("--dense", help="Also embed every passage (with --encoder) for "
                                                        "`search --retriever dense|hybrid`.")] = False,
    bm25_profile: Annotated[str, typer.Option("--bm25-profile", help="default (bm25s's English stop words, Snowball "
                                                                     "stemmer) or pyserini (Lucene's 33 stop words, "
                                                                     "Porter stemmer: Pyserini's BM25 as far as "
                                                                     "bm25s allows, see docs/reproducing.md).")]
    = "default",
    shard_size: ShardSizeOption = None,
    bm25_engine: Annotated[str, typer.Option("--bm25-engine", help="winnow (Winnow's own BM25, searched with "
                                                                   "--retriever bm25) or lucene (Lucene's postings "
                                                                   "through Pyserini, searched with --retriever "
                                                                   "lucene: needs Java 11-17 and the \\[lucene] "
                                                                   "extra).")] = "winnow",
    bm25_impacts: ImpactsOption = "float32",
    encoder: EncoderOption = "minilm",
    storage: StorageOption = "float16",
    ann: AnnBuildOption = None,
    ann_set: AnnSetOption = None,
    engine: EngineOption = "local",
    ray_address: RayAddressOption = None,
    ray_workers: RayWorkersOption = None,
    ray_cpus: RayCpusOption = 1,
    ray_gpus: RayGpusOption = None,
) -> None:
    """Build a BM25 index (Lucene BM25, k1=0.9, b=0.4, English stop words and Snowball stemmer)."""
    from ..corpus import open_corpus
    from ..index import add_ann_index, ann_settings, load_encoder
    from ..index.ann import parse_assignments
    from ..index.build import check_index_out
    from ..index.presets import get_preset
    from ..index.vectors import STORAGES
    from ..lock import output_lock

    _check_engine(bm25_engine, profile=bm25_profile, dense=dense, shard_size=shard_size, impacts=bm25_impacts)
    if shard_size is not None and dense:
        raise WinnowError("--dense cannot be combined with --shard-size yet",
                          "build the sharded index, then embed its passages: `winnow embed DIR`")
    started = time.perf_counter()
    if storage not in STORAGES:
        raise WinnowError(f"--dense-storage {storage!r} is not a storage", f"choose one of {', '.join(STORAGES)}")
    get_preset(encoder)
    ray = _ray_encoding(engine, dense=dense, address=ray_address, workers=ray_workers, cpus=ray_cpus, gpus=ray_gpus)
    wanted = [ann_settings(kind, parse_assignments(ann_set)) for kind in ann or []]
    if (wanted or encoder != "minilm") and not dense:
        raise WinnowError("--encoder and --ann need --dense", "add --dense to embed the passages")
    # Locked and checked before the slow part, so a busy, unwritable or taken --out fails at once.
    with output_lock(out_dir):
        check_index_out(out_dir, overwrite=overwrite)
        embedder = load_encoder(encoder) if dense else None  # before reading the corpus: a missing model fails fast
        corpus = open_corpus(source, chunk_words=chunk_words)
        _build(corpus, source, out_dir, chunk_words=chunk_words, shard_size=shard_size, profile=bm25_profile,
               overwrite=overwrite, embedder=embedder, storage=storage, ray=ray, bm25_engine=bm25_engine,
               impacts=bm25_impacts)
        err.print(corpus.report.summary(), soft_wrap=True)
    kept = corpus.report.kept
    for settings in wanted:
        built = add_ann_index(out_dir, settings)
        err.print(f"built the {built['kind']} index in {built['seconds']:.1f} s ({built['settings']})")
    if embedder is not None:
        from ..index.manifest import read_manifest

        stats = read_manifest(out_dir)["dense"]
        err.print(f"embedded {kept} passages with {stats['model']} in {stats['seconds']:.1f} s "
                  f"({stats['passages_per_second']:.0f} passages/s, "
                  + (f"{embedder.threads} threads)" if ray is None else "on the Ray cluster's workers)"))
    err.print(f"indexed {kept} passages into {out_dir} in {time.perf_counter() - started:.1f} s")


@app.command()
def embed(
    index_dir: Annotated[Path, typer.Argument(help="An index made by `winnow index` (a sharded one included).")],
    encoder: EncoderOption = "minilm",
    storage: StorageOption = "float16",
    ann: AnnBuildOption = None,
    ann_set: AnnSetOption = None,
    engine: EngineOption = "local",
    ray_address: RayAddressOption = None,
    ray_workers: RayWorkersOption = None,
    ray_cpus: RayCpusOption = 1,
    ray_gpus: RayGpusOption = None,
) -> None:
    """Embed the passages of an existing index for dense and hybrid search (replacing embeddings it has).

    The vectors are computed in shards kept beside the index, so a killed run resumes; with
    --engine ray the shards are computed by the workers of a Ray cluster.
    """
    from ..index import add_ann_index, add_dense_embeddings, ann_settings, load_encoder
    from ..index.ann import parse_assignments
    from ..index.presets import get_preset
    from ..index.ray_encoding import WorkerRate
    from ..index.vectors import STORAGES

    if storage not in STORAGES:
        raise WinnowError(f"--dense-storage {storage!r} is not a storage", f"choose one of {', '.join(STORAGES)}")
    get_preset(encoder)
    ray = _ray_encoding(engine, dense=True, address=ray_address, workers=ray_workers, cpus=ray_cpus, gpus=ray_gpus)
    wanted = [ann_settings(kind, parse_assignments(ann_set)) for kind in ann or []]
    if not (index_dir / "manifest.json").is_file():
        raise WinnowError(f"{index_dir} is not an index (no manifest.json)", "build one with `winnow index`")
    embedder = load_encoder(encoder)
    rates: list[WorkerRate] = []
    stats = add_dense_embeddings(index_dir, embedder=embedder, storage=storage, ray=ray, rates=rates)
    for rate in rates:
        err.print(f"  Ray worker {rate.host}: {rate.shards} shards, {rate.passages} passages, "
                  f"{rate.passages_per_second:.1f} passages/s", highlight=False)
    err.print(f"embedded the passages of {index_dir} with {stats['model']} in {stats['seconds']:.1f} s "
              f"({stats['passages_per_second']:.0f} passages/s)", highlight=False)
    for settings in wanted:
        built = add_ann_index(index_dir, settings)
        err.print(f"built the {built['kind']} index in {built['seconds']:.1f} s ({built['settings']})")


def _check_engine(bm25_engine: str, *, profile: str, dense: bool, shard_size: int | None,
                  impacts: str = "float32") -> None:
    """``--bm25-engine`` and ``--bm25-impacts`` and what they cannot be combined with, then (for lucene) Java
    and the extra, before anything is read: Lucene's analysis is its own (Porter stemmer, Lucene's stop
    words), and a Lucene index is searched by Lucene alone."""
    from ..index.analysis import bm25_profile
    from ..index.impacts import check_impacts

    bm25_profile(profile)  # before anything is read
    check_impacts(impacts)
    if bm25_engine not in ("winnow", "lucene"):
        raise WinnowError(f"--bm25-engine {bm25_engine!r} is not one of winnow, lucene")
    if bm25_engine != "lucene":
        return
    given = [flag for flag, value in (("--bm25-profile", profile != "default"), ("--dense", dense),
                                      ("--shard-size", shard_size is not None),
                                      ("--bm25-impacts", impacts != "float32")) if value]
    if given:
        raise WinnowError(f"{', '.join(given)} cannot be combined with --bm25-engine lucene",
                          "Lucene analyses text its own way (Anserini's DefaultEnglishAnalyzer) and is searched "
                          "with --retriever lucene alone; leave them out")
    from ..index.lucene_jvm import anserini

    anserini("winnow index --bm25-engine lucene")


def _build(corpus: CorpusStream, source: str, out_dir: Path, *, chunk_words: int, shard_size: int | None, profile: str,
           overwrite: bool, embedder: DenseEncoder | None, storage: Storage, ray: RayEncoding | None,
           bm25_engine: str = "winnow", impacts: str = "float32") -> None:
    """Read the corpus once into the index at ``out_dir``, in shards with ``shard_size``; a corpus
    whose every record was skipped is named as the reason the index is empty."""
    from ..corpus import source_checksum
    from ..index import build_index

    try:
        if bm25_engine == "lucene":
            from ..index.lucene_build import build_lucene_index

            build_lucene_index(corpus.passages(progress=True), out_dir, source=str(source),
                               source_checksum=lambda: source_checksum(corpus.files),
                               load_report=lambda: corpus.report.to_dict(),
                               source_options={"chunk_words": chunk_words}, overwrite=overwrite, progress=True)
        elif shard_size is not None:
            from ..index.shards import build_sharded_index

            # The source's checksum comes first here: it keys the work a killed build resumes.
            build_sharded_index(corpus.passages(progress=True), out_dir, source=str(source),
                                source_checksum=_checksum(source, corpus.files), shard_size=shard_size,
                                load_report=lambda: corpus.report.to_dict(),
                                source_options={"chunk_words": chunk_words}, profile=profile,
                                overwrite=overwrite, progress=True, report=err.print, impacts=impacts)
        else:
            # The corpus is read once, passage by passage, straight into the index's passage store.
            build_index(corpus.passages(progress=True), out_dir, source=str(source),
                        source_checksum=lambda: source_checksum(corpus.files),
                        load_report=lambda: corpus.report.to_dict(), source_options={"chunk_words": chunk_words},
                        embedder=embedder, profile=profile, overwrite=overwrite, progress=True,
                        dense_storage=storage, ray=ray, impacts=impacts)
    except WinnowError as error:
        if corpus.report.read and not corpus.report.kept:
            raise WinnowError(f"{source}: no passages to index ({corpus.report.summary()})",
                              "check the file: every record was skipped") from error
        raise


def _ray_encoding(engine: str, *, dense: bool, address: str | None, workers: int | None, cpus: float,
                  gpus: float | None) -> RayEncoding | None:
    """``--engine`` and its ``--ray-*`` options, checked before anything is read or loaded."""
    from ..extras import require
    from ..index.ray_encoding import RayEncoding
    from ..ray_cluster import check_reachable

    if engine not in ("local", "ray"):
        raise WinnowError(f"--engine {engine!r} is not one of local, ray")
    given = [name for name, value in (("--ray-address", address), ("--ray-workers", workers),
                                      ("--ray-cpus-per-worker", cpus != 1), ("--ray-gpus-per-worker", gpus))
             if value]
    if engine != "ray":
        if given:
            raise WinnowError(f"{', '.join(given)} only apply with --engine ray")
        return None
    if not dense:
        raise WinnowError("--engine ray shares out the embedding of passages", "add --dense")
    require("ray", "winnow index --dense --engine ray")
    if address:
        check_reachable(address)
    return RayEncoding(address=address, workers=workers, cpus_per_worker=cpus, gpus_per_worker=gpus)


def _checksum(source: str, files: list[Path]) -> str:
    from ..corpus import source_checksum

    try:
        return source_checksum(files)
    except OSError as error:
        raise WinnowError(f"{source}: cannot read {error.filename}: {error.strerror}",
                          "make it readable (e.g. chmod u+r)") from error


@app.command()
def search(
    query: Annotated[str, typer.Argument(help="The search query.")],
    index_dir: IndexOption,
    k: Annotated[int, typer.Option("--k", "-k", min=1, help="How many passages.")] = 10,
    retriever: Annotated[str, typer.Option("--retriever", "-r", help="bm25, dense, hybrid (BM25 and dense fused "
                                                                     "by RRF), or lucene (Lucene's BM25 through "
                                                                     "Pyserini; an index built with --bm25-engine "
                                                                     "lucene, or pyserini:NAME); dense and hybrid "
                                                                     "need an index built with --dense.")] = "bm25",
    as_json: JsonOption = False,
    ann: Annotated[str | None, typer.Option("--ann", help="Dense search through this ANN index (hnsw or ivfpq, "
                                                          "built with --ann) instead of exactly.")] = None,
    ann_set: Annotated[list[str] | None, typer.Option("--ann-set", help="A search setting NAME=VALUE: efSearch "
                                                                        "(hnsw), nprobe or refine (ivfpq).")] = None,
) -> None:
    """Search: the top k passages for QUERY (BM25 unless --retriever says otherwise)."""
    from ..index import DenseIndex, HybridIndex, open_retriever
    from ..index.ann import parse_assignments
    from ..report import no_hits_note, passages_table

    check_text(query, "the query")
    if ann is not None and retriever in ("bm25", "lucene"):
        raise WinnowError("--ann needs --retriever dense or hybrid")
    if ann_set and ann is None:
        raise WinnowError("--ann-set needs --ann")
    idx = open_retriever(index_dir, retriever, ann=ann)
    if ann_set:
        overrides = parse_assignments(ann_set)
        dense_index = idx.dense if isinstance(idx, HybridIndex) else idx
        assert isinstance(dense_index, DenseIndex) and dense_index.ann is not None
        dense_index.ann.tune(overrides)
    started = time.perf_counter()
    hits = idx.search(query, k=k)
    seconds = time.perf_counter() - started
    if as_json:
        out.print_json(data={"query": query, "retriever": idx.name, "passages": hits.to_dicts(),
                             "seconds": round(seconds, 4)})
    elif not hits:
        err.print(no_hits_note(query, idx.name), highlight=False, soft_wrap=True)
    else:
        out.print(passages_table(hits, title=f"Top {len(hits)} for {query!r} ({idx.name})", width=out.width))
    if not as_json:
        err.print(f"{seconds * 1000:.1f} ms")


@app.command("ann")
def ann_command(
    index_dir: Annotated[Path, typer.Argument(help="An index built with --dense.")],
    kind: Annotated[str, typer.Option("--ann", help="hnsw or ivfpq.")],
    ann_set: Annotated[list[str] | None, typer.Option("--ann-set", help="A setting NAME=VALUE: M, efConstruction, "
                                                                        "efSearch (hnsw); nlist, m, nbits, nprobe, "
                                                                        "refine (ivfpq).")] = None,
) -> None:
    """Build an approximate nearest-neighbour index (faiss HNSW or IVF-PQ) over an index's embeddings."""
    from ..index import add_ann_index, ann_settings
    from ..index.ann import parse_assignments

    built = add_ann_index(index_dir, ann_settings(kind, parse_assignments(ann_set)))
    err.print(f"built the {built['kind']} index of {index_dir} in {built['seconds']:.1f} s ({built['settings']})")


@app.command("sign")
def sign_command(
    index_dir: Annotated[Path, typer.Argument(help="An index made by `winnow index`.")],
) -> None:
    """Sign an index with the key in WINNOW_INDEX_KEY (or the file WINNOW_INDEX_KEY_FILE names), after
    hashing every file against its manifest; `winnow serve --require-signature` then refuses any index
    changed by someone without the key."""
    from ..index.manifest import sign_index
    from ..index.signature import KEY_FILE_VARIABLE, KEY_VARIABLE, index_key

    key = index_key()
    if key is None:
        raise WinnowError("winnow sign needs a key", f"set {KEY_VARIABLE} to the key, or {KEY_FILE_VARIABLE} to a "
                                                     "file holding it")
    manifest = sign_index(index_dir, key)
    err.print(f"signed {index_dir} ({manifest['counts']['passages']:,} passages, {len(manifest['files'])} files "
              "hashed)")
