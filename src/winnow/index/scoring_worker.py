"""``python -m winnow.index.scoring_worker INDEX exhaustive|pruned``: a worker of :mod:`.parallel`.

It opens the index, then reads ``(queries, k)`` requests (frames of :mod:`.parallel`, on standard
input) and writes each one's hits (on standard output), until its input ends. Anything else it
would print goes to standard error, so nothing can break the replies.
"""

from __future__ import annotations

import sys


def main() -> None:
    path, mode = sys.argv[1], sys.argv[2]
    requests, replies = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr
    from .bm25 import BM25Index
    from .parallel import read_frame, write_frame

    index = BM25Index.open(path, exhaustive=mode == "exhaustive", workers=1)
    while True:
        try:
            queries, k = read_frame(requests.read)
        except EOFError:
            return
        write_frame(replies, index.score(queries, k))


if __name__ == "__main__":
    main()
