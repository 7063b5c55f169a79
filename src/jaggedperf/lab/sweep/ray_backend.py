"""The Ray back end: one long-lived actor per slot anywhere on a Ray cluster, one per GPU (``num_gpus=1``)
or, on a cluster without GPUs, one per CPU worker; the scheduler, the plan and the results file are the
local engine's (``scheduler.run_sweep`` with this back end).

Each actor runs ``worker.serve`` in a thread of its own, on a channel made of two queues: ``send`` puts
a unit (or ``worker.STOP``) on its inbox, ``poll`` returns what it has said since (blocking up to a few
seconds for the first message). The driver keeps exactly one ``poll`` call outstanding per actor, so
messages arrive in the order they were sent, and waiting on every actor is one ``ray.wait`` on those
calls. An actor is threaded (``max_concurrency``) so that ``send`` and ``poll`` run while a cell does.

Deaths. An actor whose process dies (a segfault, ``os._exit``, a kill) fails its outstanding ``poll``
with ``RayActorError``: the handle is then not alive and the scheduler records the cell in flight as
"worker died", as for a local process (Ray gives no exit code: "exit code unknown"). An actor whose
node left the cluster is ``lost()``: the scheduler then requeues its cells in flight instead, since
they did not cause the loss. A kill on timeout is ``ray.kill``; Ray reaps the actor's process.

Ray is optional (``pip install 'jaggedperf[ray]'``): this module imports it only when used, and
``RayUnavailable`` says how to get it.
"""

from __future__ import annotations

import contextlib
import os
import queue
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from jaggedperf.lab import runner
from jaggedperf.lab.sweep import worker
from jaggedperf.lab.sweep.local import redirect_output
from jaggedperf.lab.sweep.slots import WorkerSlot

POLL_S = 5.0  # how long an actor's poll waits for a first message (the driver waits on polls, not on actors)
STOP_WAIT_S = 10.0  # how long an idle actor asked to stop may take to end before it is killed
_ENDED = "_ended"  # an actor's last message, once worker.serve has returned: ("_ended", exit code)
INSTALL = "pip install 'jaggedperf[ray]'"


class RayUnavailable(RuntimeError):
    """Ray is not installed here (or cannot be imported)."""


def import_ray() -> Any:
    """The ``ray`` module.

    Returns:
        ``ray``.

    Raises:
        RayUnavailable: it cannot be imported; the message says how to install it.
    """
    try:
        import ray
    except ImportError as exc:
        raise RayUnavailable(f"--ray needs Ray, which is not installed ({exc}): {INSTALL}") from None
    return ray


@dataclass(frozen=True)
class Cluster:
    """The Ray cluster a sweep runs on, as the driver saw it on joining."""

    address: str  # as given, or "local" for a cluster started here
    nodes: int  # alive nodes
    gpus: int  # GPUs in the whole cluster
    cpus_per_node: float  # the fewest CPUs of any alive node


@contextlib.contextmanager
def connect(address: str | None = None, *, num_cpus: int | None = None) -> Iterator[Cluster]:
    """Join the Ray cluster at ``address`` for the ``with`` block, or start a local one.

    ``address`` None joins the cluster ``$RAY_ADDRESS`` names, else starts one on this host for the block
    (with ``num_cpus`` CPUs, default all). A process already connected to Ray keeps its connection
    (``address`` is then not used) and stays connected after the block. The workers' output is not forwarded to this process (the
    sweep's log holds it), and Ray's dashboard is not started for a local cluster.

    Args:
        address: ``host:port``, ``ray://host:port``, ``auto``, or None.
        num_cpus: CPUs of a local cluster started here (None: Ray's default, every core).

    Yields:
        What the cluster holds.

    Raises:
        RayUnavailable: Ray is not installed.
        ConnectionError: the cluster cannot be reached (Ray's message).
    """
    ray = import_ray()
    joined = not ray.is_initialized()  # already connected (a library caller, a test): used as it is, kept after
    if joined:
        kwargs: dict[str, Any] = {"log_to_driver": False, "configure_logging": False}
        if address is None and not os.environ.get("RAY_ADDRESS"):
            kwargs.update(include_dashboard=False, num_cpus=num_cpus)
        ray.init(address=address, **kwargs)
    try:
        nodes = [n for n in ray.nodes() if n.get("Alive")]
        resources = ray.cluster_resources()
        cpus = min((n.get("Resources", {}).get("CPU", 0.0) for n in nodes), default=0.0)
        yield Cluster(address or os.environ.get("RAY_ADDRESS") or "local", len(nodes), int(resources.get("GPU", 0)), cpus)
    finally:
        if joined:
            ray.shutdown()


def ray_slots(cluster: Cluster, device: str | None = None, workers: int | None = None) -> list[WorkerSlot]:
    """The slots of a sweep on ``cluster``: one per GPU, or one per CPU worker when there is no GPU.

    Args:
        cluster: from ``connect``.
        device: ``"cuda"``, ``"cpu"``, or None for GPUs when the cluster has any.
        workers: how many workers (default: every GPU; on the CPU, one per node, each taking a node's
            CPUs, so that no two share cores and skew each other's times).

    Returns:
        The slots, named ``ray:gpuN`` or ``ray:cpuN``; where each runs is Ray's choice.

    Raises:
        ValueError: GPUs asked for on a cluster without, or more workers than it can hold.
    """
    use_gpus = device == "cuda" or (device is None and cluster.gpus > 0)
    if use_gpus:
        if cluster.gpus == 0:
            raise ValueError("--device cuda: the Ray cluster has no GPU")
        count = workers or cluster.gpus
        if count > cluster.gpus:
            raise ValueError(f"{count} GPU workers: the Ray cluster has {cluster.gpus} GPUs")
        return [WorkerSlot(f"ray:gpu{i}", "cuda") for i in range(count)]
    return [WorkerSlot(f"ray:cpu{i}", "cpu") for i in range(workers or max(cluster.nodes, 1))]


class RayActors:
    """``Backend`` on a Ray cluster: each worker an actor (see the module's notes)."""

    def __init__(self, cpus_per_worker: float = 1.0, gpus_per_worker: float = 1.0) -> None:
        """
        Args:
            cpus_per_worker: CPUs a CPU slot's actor takes (a node's CPU count: one actor per node).
            gpus_per_worker: GPUs a GPU slot's actor takes.
        """
        self.ray = import_ray()
        self.cpus_per_worker, self.gpus_per_worker = cpus_per_worker, gpus_per_worker
        self._actor_class = self.ray.remote(_Actor)

    def start(self, slot: WorkerSlot, options: runner.Options, plugins: tuple[str, ...],
              log_path: str | None) -> RayWorker:
        """Create the actor of ``slot`` (see ``backend.Backend.start``); it is placed when Ray can.

        Returns:
            The driver's handle on it.
        """
        resources = ({"num_gpus": self.gpus_per_worker, "num_cpus": 1} if slot.device == "cuda"
                     else {"num_cpus": self.cpus_per_worker})
        actor = self._actor_class.options(max_concurrency=4, max_restarts=0, name=None,
                                          **resources).remote(slot, options, tuple(plugins), log_path)
        return RayWorker(self.ray, actor)

    def wait(self, handles: list[RayWorker], timeout: float | None) -> None:
        """One ``ray.wait`` on the handles' outstanding polls (see ``backend.Backend.wait``)."""
        if any(h.pending() for h in handles):
            return
        polls = [h.poll_ref for h in handles if h.poll_ref is not None]
        if polls:
            self.ray.wait(polls, num_returns=1, timeout=timeout)
        elif timeout:
            time.sleep(min(timeout, POLL_S))


class RayWorker:
    """``WorkerHandle`` of one actor. Invariant: ``poll_ref`` is the one outstanding poll, None once the
    actor has ended (then ``_code`` or ``_died`` says how)."""

    def __init__(self, ray: Any, actor: Any) -> None:
        self.ray, self.actor = ray, actor
        self.poll_ref = actor.poll.remote(POLL_S)
        self._inbox: list[tuple] = []  # fetched, not yet received
        self._ended = False
        self._code: int | None = None
        self._ready = False
        self.node_id: str | None = None  # the node it runs on, once ready

    def _fetch(self, timeout: float = 0.0) -> None:
        """Take the outstanding poll's messages if it has returned, and poll again."""
        if self.poll_ref is None:
            return
        done, _ = self.ray.wait([self.poll_ref], timeout=timeout)
        if not done:
            return
        try:
            messages = self.ray.get(self.poll_ref)
        except self.ray.exceptions.RayActorError as exc:
            self.poll_ref, self._ended = None, True
            if not self._ready:  # the scheduler records this as the failed start's reason
                self._inbox.append(("failed", f"the Ray actor ended during start-up: {_first_line(exc)}"))
            return
        for message in messages:
            if message[0] == _ENDED:
                self._ended, self._code = True, message[1]
            else:
                if message[0] == "ready":
                    self._ready, self.node_id = True, message[1].get("ray_node")
                self._inbox.append(message)
        self.poll_ref = None if self._ended else self.actor.poll.remote(POLL_S)

    def pending(self) -> bool:
        """Whether something waits to be handled without waiting on Ray (messages, or an end)."""
        return bool(self._inbox) or self._ended

    def send(self, message: object) -> None:
        self.actor.send.remote(message)

    def receive(self) -> list[tuple]:
        self._fetch()
        messages, self._inbox = self._inbox, []
        return messages

    def has_message(self) -> bool:
        self._fetch()
        return bool(self._inbox)

    def alive(self) -> bool:
        self._fetch()
        return not self._ended

    def exit_code(self) -> int | None:
        return self._code

    def lost(self) -> bool:
        """Whether the actor ended because its node left the cluster (its cells did not end it)."""
        if not self._ended or self.node_id is None or self._code is not None:
            return False
        with contextlib.suppress(Exception):  # the cluster cannot be asked: assume the cell's fault
            return not any(n.get("NodeID") == self.node_id and n.get("Alive") for n in self.ray.nodes())
        return False

    def kill(self) -> None:
        with contextlib.suppress(Exception):  # already gone
            self.ray.kill(self.actor, no_restart=True)
        self._ended, self.poll_ref = True, None

    def stop(self) -> None:
        """Ask the idle actor to end, wait for it up to ``STOP_WAIT_S``, then kill it."""
        with contextlib.suppress(Exception):
            self.send(worker.STOP)
            deadline = time.monotonic() + STOP_WAIT_S
            while not self._ended and time.monotonic() < deadline:
                self._fetch(timeout=max(0.0, deadline - time.monotonic()))
        self.kill()


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    reason = next((line for line in lines if "because" in line or "Error" in line), lines[0] if lines else "")
    return " ".join(reason.split())[:300]


# --- the actor (runs in a Ray worker process) -------------------------------------------------------


class _QueueChannel:
    """``worker.Channel`` over the actor's two queues; adds the Ray node to the ready message."""

    def __init__(self, inbox: queue.Queue, outbox: queue.Queue, node_id: str | None) -> None:
        self.inbox, self.outbox, self.node_id = inbox, outbox, node_id

    def send(self, message: object) -> None:
        if isinstance(message, tuple) and message[0] == "ready":
            message = ("ready", {**message[1], "ray_node": self.node_id})
        self.outbox.put(message)

    def recv(self) -> object:
        return self.inbox.get()


class _Actor:
    """One worker as a Ray actor: ``worker.serve`` in a thread, the driver's calls on the queues."""

    def __init__(self, slot: WorkerSlot, options: runner.Options, plugins: tuple[str, ...], log_path: str | None):
        import ray

        if log_path and Path(log_path).parent.is_dir():  # on this host or a shared file system; else Ray's logs
            redirect_output(log_path, slot)
        self.inbox: queue.Queue = queue.Queue()
        self.outbox: queue.Queue = queue.Queue()
        channel = _QueueChannel(self.inbox, self.outbox, ray.get_runtime_context().get_node_id())
        threading.Thread(target=self._serve, args=(channel, slot, options, plugins), name="jaggedperf-worker",
                         daemon=True).start()

    def _serve(self, channel: _QueueChannel, slot: WorkerSlot, options: runner.Options, plugins: tuple[str, ...]):
        code = 0
        try:
            worker.serve(channel, slot, options, plugins)
        except SystemExit as exc:  # set-up failed; ("failed", why) was sent
            code = exc.code if isinstance(exc.code, int) else 1
        except BaseException as exc:  # anything serve did not expect: say so, as a start failure would
            self.outbox.put(("failed", f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"))
            code = 1
        self.outbox.put((_ENDED, code))

    def send(self, message: object) -> None:
        self.inbox.put(message)

    def poll(self, timeout: float) -> list[tuple]:
        """Every message said since the last poll, waiting up to ``timeout`` s for the first ([] if none)."""
        try:
            messages = [self.outbox.get(timeout=timeout)]
        except queue.Empty:
            return []
        with contextlib.suppress(queue.Empty):
            while True:
                messages.append(self.outbox.get_nowait())
        return messages
