"""Many proof searches, one tactic model: searches run side by side and their tactic requests are batched.

A search asks for tactics a goal at a time and then waits on the prover for milliseconds to seconds. Run one
after another, a GPU model idles while the prover works and the prover idles while the model decodes. Here
`searches` searches run in threads, each with a prover session of its own (a separate process, so the
provers use the host's cores), and share one `SharedTacticPolicy`: every request waiting when the model
becomes free is answered by one batched `suggest` call (continuous batching across searches), so no search
waits on another's prover and the model sees batches as wide as the searches in flight.

A theorem's search does not depend on which searches run beside it: the generative policy seeds each goal's
samples by the goal alone (`models.generative.goal_seed`) and the ranked policy's exploration is seeded per goal, so
only prover timing (timeouts) can differ from a one-at-a-time run.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field

from aitp.proving.data.traces import merge_rows
from aitp.proving.env import Goal, ProverEnv, Theorem
from aitp.proving.learning import SearchOutcome, search_theorems
from aitp.proving.search.base import Search, TacticPolicy, TacticSuggestion


@dataclass
class ModelLoad:
    """How busy the shared model was: calls, goals answered, seconds inside `suggest`, widest batch."""

    calls: int = 0
    goals: int = 0
    tactics: int = 0
    busy_seconds: float = 0.0
    widest: int = 0


@dataclass
class _Request:
    goals: list[Goal]
    n: int
    answer: Future = field(default_factory=Future)


class SharedTacticPolicy:
    """A tactic policy many threads may call at once: their waiting requests go to the model as one batch.

    `max_goals` caps one batch (a model's memory bound); requests beyond it wait for the next call.
    Use it as a context manager, or call `close()`: it owns a dispatcher thread.
    """

    def __init__(self, policy: TacticPolicy, max_goals: int = 1024) -> None:
        if max_goals < 1:
            raise ValueError(f"max_goals must be at least 1, got {max_goals}")
        self.policy = policy
        self.max_goals = max_goals
        self.load = ModelLoad()
        self._queue: queue.SimpleQueue[_Request | None] = queue.SimpleQueue()
        self._held: _Request | None = None  # taken from the queue, did not fit the last batch
        self._thread = threading.Thread(target=self._dispatch, name="aitp-tactic-model", daemon=True)
        self._thread.start()

    def suggest(self, goals: list[Goal], n: int) -> list[list[TacticSuggestion]]:
        """What `policy.suggest(goals, n)` gives, answered inside a batch with the other waiting searches."""
        if not goals:
            return []
        request = _Request(list(goals), n)
        self._queue.put(request)
        return request.answer.result()

    def _next_batch(self) -> list[_Request] | None:
        first = self._held or self._queue.get()
        self._held = None
        if first is None:
            return None
        batch, size = [first], len(first.goals)
        while True:
            try:
                more = self._queue.get_nowait()
            except queue.Empty:
                return batch
            if more is None:  # close() while requests wait: answer them first, then stop
                self._queue.put(None)
                return batch
            if size + len(more.goals) > self.max_goals:
                self._held = more
                return batch
            batch.append(more)
            size += len(more.goals)

    def _dispatch(self) -> None:
        while (batch := self._next_batch()) is not None:
            by_n: dict[int, list[_Request]] = {}
            for request in batch:
                by_n.setdefault(request.n, []).append(request)
            for n, requests in by_n.items():
                self._answer(n, requests)

    def _answer(self, n: int, requests: list[_Request]) -> None:
        goals = [g for r in requests for g in r.goals]
        start = time.perf_counter()
        try:
            answers = self.policy.suggest(goals, n)
        except BaseException as exc:  # the searches waiting on it must see the error, not hang
            for r in requests:
                r.answer.set_exception(exc)
            return
        finally:
            self.load.busy_seconds += time.perf_counter() - start
        self.load.calls += 1
        self.load.goals += len(goals)
        self.load.tactics += sum(len(a) for a in answers)
        self.load.widest = max(self.load.widest, len(goals))
        at = 0
        for r in requests:
            r.answer.set_result(answers[at : at + len(r.goals)])
            at += len(r.goals)

    def close(self) -> None:
        """Answer what is waiting, then stop the dispatcher."""
        if self._thread.is_alive():
            self._queue.put(None)
            self._thread.join()

    def __enter__(self) -> SharedTacticPolicy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass
class ConcurrentFigures:
    """Throughput of a concurrent pass: theorems per minute, tactics per second, how busy provers and model were."""

    searches: int
    theorems: int
    wall_seconds: float
    theorems_per_minute: float
    tactics_per_second: float
    prover_busy_share: float
    model_busy_share: float
    mean_batch_goals: float
    widest_batch_goals: int

    def as_metrics(self) -> dict[str, float]:
        """Numbers only, for MLflow and the lake."""
        return {k: float(v) for k, v in self.__dict__.items()}


def search_concurrently(
    open_session: Callable[[], ProverEnv],
    theorems: Sequence[Theorem],
    new_search: Callable[[], Search],
    policy: SharedTacticPolicy,
    searches: int,
    experiment: str = "",
    iteration: int = 0,
    model_version: str = "",
) -> tuple[SearchOutcome, ConcurrentFigures]:
    """Search `theorems` with `searches` prover sessions at once sharing `policy`; outcome in theorem order.

    `open_session` starts one prover session (premises set); each thread opens its own and closes it at the end.
    """
    if searches < 1:
        raise ValueError(f"searches must be at least 1, got {searches}")
    outcomes: list[SearchOutcome | None] = [None] * len(theorems)
    errors: list[BaseException] = []
    next_index = iter(range(len(theorems)))
    lock = threading.Lock()

    def worker() -> None:
        try:
            with open_session() as env:
                search = new_search()
                while not errors:
                    with lock:
                        i = next(next_index, None)
                    if i is None:
                        return
                    outcomes[i] = search_theorems(
                        env, [theorems[i]], search, policy, experiment, iteration, model_version
                    )
        except BaseException as exc:  # re-raised in the caller's thread, after the others stop
            errors.append(exc)

    busy_before, load_before = policy.load.busy_seconds, (policy.load.calls, policy.load.goals, policy.load.tactics)
    start = time.perf_counter()
    threads = [threading.Thread(target=worker, name=f"aitp-search-{k}") for k in range(min(searches, len(theorems)))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    if errors:
        raise errors[0]
    done = [o for o in outcomes if o is not None]
    outcome = SearchOutcome([a for o in done for a in o.attempts], merge_rows([o.rows for o in done]))
    calls = policy.load.calls - load_before[0]
    goals = policy.load.goals - load_before[1]
    tactics = policy.load.tactics - load_before[2]
    prover = sum(a.prover_seconds for a in outcome.attempts)
    lanes = max(1, len(threads))
    figures = ConcurrentFigures(
        searches=lanes,
        theorems=len(theorems),
        wall_seconds=wall,
        theorems_per_minute=60.0 * len(theorems) / wall if wall > 0 else 0.0,
        tactics_per_second=tactics / wall if wall > 0 else 0.0,
        prover_busy_share=min(1.0, prover / (wall * lanes)) if wall > 0 else 0.0,
        model_busy_share=min(1.0, (policy.load.busy_seconds - busy_before) / wall) if wall > 0 else 0.0,
        mean_batch_goals=goals / calls if calls else 0.0,
        widest_batch_goals=policy.load.widest,
    )
    return outcome, figures
