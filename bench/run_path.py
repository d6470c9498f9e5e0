"""Which ``runlane`` modules one run crosses, and which pairs of them call each other.

A profile hook records, for every call into a ``runlane`` module, the module called
and the ``runlane`` module that called it, while one run is triggered and then
drained by a worker on an open SQLite runtime without observers. Opening the lane
and building the worker happen before the hook is set, so only the run's own path
is counted. A "loop back" is a pair of modules each of which calls the other.

    .venv/bin/python bench/run_path.py            # counts, modules and loops
    .venv/bin/python bench/run_path.py --edges    # also every caller -> callee pair
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import threading
from pathlib import Path
from types import FrameType
from typing import Any

from runlane import Runlane, queue, sqlite_lane, task

MAIN = queue("main", default=True)


@task("noop")
async def noop(payload: Any) -> None:
    return None


def module_of(frame: FrameType | None) -> str | None:
    """The ``runlane`` module a frame runs in, as ``core/runtime.py``, or ``None``."""
    if frame is None:
        return None
    name = frame.f_globals.get("__name__", "")
    if not isinstance(name, str) or not name.startswith("runlane."):
        return None
    return name.removeprefix("runlane.").replace(".", "/") + ".py"


class PathRecorder:
    """Collects the modules called and the caller → callee pairs between modules."""

    def __init__(self) -> None:
        self.modules: set[str] = set()
        self.edges: set[tuple[str, str]] = set()
        self._lock = threading.Lock()

    def __call__(self, frame: FrameType, event: str, arg: object) -> None:
        if event != "call":
            return
        callee = module_of(frame)
        if callee is None:
            return
        # The nearest runlane frame up the stack is the caller (library frames between
        # them, such as asyncio's, are skipped).
        back = frame.f_back
        while back is not None and module_of(back) is None:
            back = back.f_back
        caller = module_of(back)
        with self._lock:
            self.modules.add(callee)
            if caller is not None and caller != callee:
                self.edges.add((caller, callee))

    def loops(self) -> list[tuple[str, str]]:
        """Pairs of modules that call each other, each pair once."""
        return sorted((a, b) for a, b in self.edges if a < b and (b, a) in self.edges)


async def trace_one_run(directory: Path) -> PathRecorder:
    recorder = PathRecorder()
    async with Runlane(lane=sqlite_lane(directory / "path.db"), queues=[MAIN], tasks=[noop]) as rl:
        worker = rl.worker(mode="drain", handle_signals=False, maintenance=False)
        threading.setprofile(recorder)
        sys.setprofile(recorder)
        try:
            await rl.trigger(noop, {})
            await worker.run()
        finally:
            sys.setprofile(None)
            threading.setprofile(None)  # type: ignore[arg-type]
    return recorder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--edges", action="store_true", help="print every caller -> callee")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        recorder = asyncio.run(trace_one_run(Path(directory)))
    loops = recorder.loops()
    print(f"modules crossed: {len(recorder.modules)}")
    for module in sorted(recorder.modules):
        print(f"  {module}")
    print(f"loops back: {len(loops)}")
    for a, b in loops:
        print(f"  {a} <-> {b}")
    if args.edges:
        print("calls between modules:")
        for caller, callee in sorted(recorder.edges):
            print(f"  {caller} -> {callee}")


if __name__ == "__main__":
    main()
