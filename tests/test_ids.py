"""``hatchway.ids.new_id``: the ULID layout in Crockford base32, time-ordered, unique across threads
and forks."""

from __future__ import annotations

import os
import re
import threading
import time

from hatchway import ids
from hatchway.ids import new_id

CROCKFORD = "0123456789abcdefghjkmnpqrstvwxyz"
SHAPE = re.compile(rf"^log_[{CROCKFORD}]{{26}}$")


def _decoded(text: str) -> int:
    value = 0
    for char in text:
        value = value * 32 + CROCKFORD.index(char)
    return value


def test_an_id_is_its_prefix_the_millisecond_and_80_random_bits() -> None:
    before = time.time_ns() // 1_000_000
    ident = new_id("log")
    after = time.time_ns() // 1_000_000
    assert SHAPE.match(ident), ident
    assert before <= _decoded(ident[4:14]) <= after
    assert new_id("chatcmpl").startswith("chatcmpl_")


def test_ids_sort_by_time_and_never_repeat() -> None:
    ids = []
    for _ in range(3):
        ids.extend(new_id("log") for _ in range(500))  # several random batches
        stamp = time.time_ns() // 1_000_000
        while time.time_ns() // 1_000_000 == stamp:  # the next millisecond, by the clock, not a sleep
            pass
    assert len(set(ids)) == len(ids)
    stamps = [ident[4:14] for ident in ids]
    assert stamps == sorted(stamps)
    randoms = {ident[14:] for ident in ids}
    assert len(randoms) == len(ids)
    # every character of the random part is used: the bits are not stuck
    assert set("".join(randoms)) == set(CROCKFORD)


def test_threads_never_share_an_id() -> None:
    out: list[list[str]] = [[] for _ in range(8)]
    start = threading.Barrier(8)

    def draw(bucket: list[str]) -> None:
        start.wait()
        bucket.extend(new_id("log") for _ in range(2000))

    threads = [threading.Thread(target=draw, args=(bucket,)) for bucket in out]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    everything = [ident for bucket in out for ident in bucket]
    assert len(set(everything)) == len(everything) == 16000


def test_a_forked_child_does_not_hand_out_its_parents_ids() -> None:
    ids._forget_random()
    new_id("log")  # a fresh batch: the parent holds 63 drawn random parts
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its next ids, to the parent, and never back into pytest
        try:
            os.close(read)
            os.write(write, " ".join(new_id("log")[14:] for _ in range(10)).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        child = set(pipe.read().split())
    os.waitpid(pid, 0)
    parent = {new_id("log")[14:] for _ in range(10)}
    assert len(child) == 10
    assert not child & parent
