"""The worker processes a stage runs its units in (pipeline.gpus.run_at_once): a pool with concurrent.futures'
interface whose failures stay with the call that met them.

Each worker is a spawned process (CUDA cannot be used in forked children) that runs one call at a time and is reused
for the next, but:

- a worker whose call failed with a CUDA error other than the allocator's out of memory (a device-side assert, an
  illegal address: `cuda_error`) reports it and ends, since its CUDA context is unusable from then on; the next call
  gets a fresh worker in its place (the same slot, so the same GPU);
- a worker that dies while it runs a call (a signal: the kernel's out-of-memory killer sends SIGKILL) fails that call
  alone, with `WorkerDied` naming the signal and the host's memory; the other calls go on, and a fresh worker takes
  its place. (concurrent.futures' ProcessPoolExecutor marks itself broken instead, and fails every call in flight);
- a worker ends with its stage whatever it was doing: its parent-death signal (SIGTERM, set by the initializer)
  ends it when idle, and inside a run the run's handler turns it into SystemExit (cory.tracking.runs), which this
  loop lets end the process (ProcessPoolExecutor's loop catches it and waits on its queue forever).
"""

from __future__ import annotations

import atexit
import multiprocessing
import pickle
import signal
import threading
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from multiprocessing.connection import wait
from pathlib import Path
from typing import Callable


class WorkerDied(RuntimeError):
    """The worker process running a call ended before the call did; the message says how, and the likely cause."""


def cuda_error(exc: BaseException) -> bool:
    """Whether a call failed on a CUDA error that leaves its process's CUDA context unusable: torch's
    AcceleratorError, or a RuntimeError saying "CUDA error" (torch before AcceleratorError, and a context that could
    not be created). torch.OutOfMemoryError, the caching allocator's, leaves the context as it was."""
    import sys

    torch = sys.modules.get("torch")
    if torch is not None and isinstance(exc, torch.OutOfMemoryError):
        return False
    accelerator = getattr(torch, "AcceleratorError", None) if torch is not None else None
    return (accelerator is not None and isinstance(exc, accelerator)) or "CUDA error" in str(exc)


def host_memory() -> str:
    """The host's available and total memory now, from /proc/meminfo ("" where there is none)."""
    try:
        fields = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())
        available, total = (int(fields[key].split()[0]) / 2**20 for key in ("MemAvailable", "MemTotal"))
    except (OSError, ValueError, KeyError):
        return ""
    return f"{available:.1f} of the host's {total:.1f} GiB available now"


def died_line(exitcode: int | None) -> str:
    """How a worker process ended, and what most likely ended it."""
    if exitcode is None or exitcode >= 0:
        return f"its worker process exited with status {exitcode} while running it"
    name = signal.Signals(-exitcode).name if -exitcode in signal.valid_signals() else f"signal {-exitcode}"
    line = f"its worker process was killed by {name} while running it"
    if -exitcode == signal.SIGKILL:
        memory = host_memory()
        line += (": likely the kernel's out-of-memory killer, which sends SIGKILL when the host runs out of memory"
                 + (f" ({memory})" if memory else ""))
    return line


def serve(conn, initializer: Callable, initargs: tuple) -> None:
    """A worker's loop: run each (function, args) the pool sends and send back (ok, result or exception, retire).
    An exception that is no Exception (SystemExit, KeyboardInterrupt) ends the process, as does a CUDA error once it
    is reported (`retire`)."""
    initializer(*initargs)
    while True:
        try:
            task = conn.recv()
        except (EOFError, OSError):
            return  # the pool is gone
        if task is None:
            return
        function, args = task
        try:
            conn.send((True, function(*args), False))
        except Exception as error:  # noqa: BLE001 - reported to the pool, which names it
            retire = cuda_error(error)
            conn.send((False, _portable(error), retire))
            if retire:
                return


def _portable(error: Exception) -> Exception:
    """The error as the pool can receive it: itself (its attributes included) if it pickles and unpickles, else a
    RuntimeError of its type and message."""
    try:
        pickle.loads(pickle.dumps(error))
        return error
    except Exception:  # noqa: BLE001 - any failure to pickle or unpickle
        return RuntimeError(f"{type(error).__name__}: {error}")


class Worker:
    """One worker process of a pool, in slot `slot` (which its initializer gets last), and its pipe."""

    def __init__(self, context, slot: int, initializer: Callable, initargs: tuple):
        self.slot = slot
        self.conn, child = context.Pipe()
        self.process = context.Process(target=serve, args=(child, initializer, (*initargs, slot)),
                                       name=f"worker-{slot}")
        self.process.start()
        child.close()
        self.retired = False

    def call(self, function: Callable, args: tuple):
        """function(*args) in this worker: its result, or its exception raised here; WorkerDied if the process
        ends first."""
        try:
            self.conn.send((function, args))
            ready = wait([self.conn, self.process.sentinel])
            answer = self.conn.recv() if self.conn in ready else None
        except (EOFError, OSError):  # the pipe closed under it: the process ended
            answer = None
        if answer is None:
            self.process.join()
            self.retired = True
            raise WorkerDied(died_line(self.process.exitcode))
        ok, value, self.retired = answer
        if not ok:
            raise value
        return value

    def stop(self, timeout: float = 30.0) -> None:
        """Ask an idle worker to end, and wait for it; one that does not end in time is terminated."""
        try:
            self.conn.send(None)
        except OSError:
            pass
        self.process.join(timeout)
        if self.process.is_alive():
            self.process.terminate()
            self.process.join()
        self.conn.close()


class WorkerPool(Executor):
    """At most `processes` calls at once, each in a worker process of one of `processes` slots; `initializer` runs in
    each worker first, with `initargs` and the worker's slot."""

    def __init__(self, processes: int, initializer: Callable, initargs: tuple = ()):
        self._context = multiprocessing.get_context("spawn")
        self._initializer, self._initargs = initializer, initargs
        self._turns = threading.Semaphore(processes)
        self._lock = threading.Lock()
        self._idle: list[Worker] = []
        self._free = list(range(processes))  # slots without a live worker
        self._threads: list[threading.Thread] = []
        # Workers are started from one thread that lives as long as the pool: Linux sends a worker its parent-death
        # signal when the thread that started it ends, not the process (prctl(2), PR_SET_PDEATHSIG).
        self._starter = ThreadPoolExecutor(1, thread_name_prefix="worker-starter")
        atexit.register(self.shutdown, wait=False)  # idle workers end with the stage even where it fails

    def submit(self, fn: Callable, /, *args, **kwargs) -> Future:
        if kwargs:
            raise TypeError("WorkerPool.submit takes positional arguments only")
        future: Future = Future()
        thread = threading.Thread(target=self._run, args=(future, fn, args), daemon=True)
        self._threads.append(thread)
        thread.start()
        return future

    def _run(self, future: Future, fn: Callable, args: tuple) -> None:
        with self._turns:
            if not future.set_running_or_notify_cancel():
                return
            worker = None
            try:
                worker = self._worker()
                future.set_result(worker.call(fn, args))
            except BaseException as error:  # noqa: BLE001 - the call's (or its worker's start), for whoever waits
                future.set_exception(error)
            finally:
                if worker is not None:
                    self._give_back(worker)

    def _worker(self) -> Worker:
        with self._lock:
            while self._idle:
                worker = self._idle.pop()
                if worker.process.is_alive():
                    return worker
                self._free.append(worker.slot)  # died while idle
            slot = self._free.pop(0)
        try:
            return self._starter.submit(Worker, self._context, slot, self._initializer, self._initargs).result()
        except BaseException:
            with self._lock:
                self._free.append(slot)
            raise

    def _give_back(self, worker: Worker) -> None:
        """An ended call's worker: idle again, or, retired (a CUDA error, or its process ended), its slot free."""
        if worker.retired:
            worker.process.join()
            worker.conn.close()
        with self._lock:
            if worker.retired:
                self._free.append(worker.slot)
            else:
                self._idle.append(worker)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        if wait:
            for thread in list(self._threads):
                thread.join()
        with self._lock:
            idle, self._idle = self._idle, []
        for worker in idle:
            worker.stop()
        self._starter.shutdown(wait=wait)
