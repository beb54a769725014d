"""A large ``search_many`` batch scored on every core (winnow.index.parallel): worker processes,
each with the index open, and this process share the batch; the hits are the same to the bit as
one process's, a worker that dies leaves its queries to this process, and the workers never run the
caller's script again. Real worker processes over real sharded indexes (tests/test_pruning.py's
corpus, whose words follow a Zipf law)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
from test_pruning import corpus, queries, same

from winnow.errors import WinnowWarning
from winnow.index import BM25Index, build_bm25_index, parallel
from winnow.index.shards import build_sharded_index

pytestmark = pytest.mark.subprocess


@pytest.fixture(scope="module")
def indexes(tmp_path_factory):
    folder = tmp_path_factory.mktemp("parallel")
    build_sharded_index(corpus(), folder / "sharded", source="test", source_checksum="abc", shard_size=170,
                        progress=False, report=lambda line: None, impacts="float16")
    build_bm25_index(corpus(), folder / "single", source="test", source_checksum="abc", progress=False)
    return folder


@pytest.fixture
def shared_out(monkeypatch):
    """Batches of 40 queries and more shared out (conftest.py shares none by default), in chunks of 3."""
    monkeypatch.setattr(parallel, "PARALLEL_MIN_WORK", 40 * len(corpus()))
    monkeypatch.setattr(parallel, "CHUNK_QUERIES", 3)


@pytest.mark.parametrize("layout", ["sharded", "single"])
def test_a_batch_on_worker_processes_gives_one_processs_hits_to_the_bit(indexes, shared_out, layout):
    alone = BM25Index.open(indexes / layout, workers=1)
    shared = BM25Index.open(indexes / layout, workers=3)
    asked = queries(count=200, seed=21)
    expected = alone.search_many(asked, k=25)
    try:
        same(shared.search_many(asked, k=25), expected)
        assert shared._pool is not None and shared._pool.alive and len(shared._pool._workers) == 2
        workers = [worker.process for worker in shared._pool._workers]
        # A smaller batch than the bar stays in this process; the next large one reuses the workers.
        same(shared.search_many(asked[:10], k=5), alone.search_many(asked[:10], k=5))
        same(shared.search_many(queries(count=90, seed=22), k=8), alone.search_many(queries(count=90, seed=22), k=8))
        assert [worker.process for worker in shared._pool._workers] == workers
    finally:
        shared.close()
    assert all(process.poll() is not None for process in workers)  # closed: the workers ended


def test_a_worker_that_dies_leaves_its_queries_to_this_process(indexes, shared_out):
    alone = BM25Index.open(indexes / "sharded", workers=1)
    shared = BM25Index.open(indexes / "sharded", workers=3)
    try:
        shared.search_many(queries(count=60, seed=31), k=10)  # starts the workers
        killed = shared._pool._workers[0].process
        killed.kill()
        killed.wait()
        asked = queries(count=120, seed=32)
        same(shared.search_many(asked, k=10), alone.search_many(asked, k=10))
        assert len(shared._pool._workers) == 1 and shared._pool._workers[0].process is not killed
    finally:
        shared.close()


def test_workers_do_not_run_the_callers_script_again(indexes, tmp_path):
    # multiprocessing's spawn would import this script in each worker: without a __main__ guard it
    # would start over there (and fail at starting processes while it starts).
    script = tmp_path / "search.py"
    script.write_text(textwrap.dedent(f"""
        print("script started", flush=True)
        from winnow.index import BM25Index, parallel
        parallel.PARALLEL_MIN_WORK = 2
        index = BM25Index.open({str(indexes / "sharded")!r}, workers=2)
        print(len(index.search_many(["kalap morek"] * 3 + ["tenim", "vixos druut"] * 20, k=5)), flush=True)
    """))
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n") == ["script started", "43", ""]


def test_workers_below_one_are_refused(indexes):
    with pytest.raises(Exception, match="workers must be at least 1"):
        BM25Index.open(indexes / "sharded", workers=0)


def test_workers_that_cannot_start_leave_the_batch_to_this_process_with_a_warning(indexes, shared_out, monkeypatch):
    alone = BM25Index.open(indexes / "sharded", workers=1)
    shared = BM25Index.open(indexes / "sharded", workers=2)
    monkeypatch.setattr(sys, "executable", str(indexes / "no-such-python"))  # a real failure to start one
    asked = queries(count=80, seed=41)
    with pytest.warns(WinnowWarning, match="scoring workers could not start"):
        found = shared.search_many(asked, k=10)
    same(found, alone.search_many(asked, k=10))
    assert shared.workers == 1 and shared._pool is None
