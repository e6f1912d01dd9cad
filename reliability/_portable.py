"""Beam's portable runner on one machine, with SDK workers in processes that can be SIGKILLed.

The path Flink and Dataflow take: a pipeline goes to a job service over the Job API
(``local_job_service_main``, a process of its own), which runs it by asking a worker pool
(``worker_pool_main``, a process of its own) to start SDK harnesses
(``--environment_type=EXTERNAL``): separate Python processes that get the pickled DoFns over
the Fn API (gRPC on 127.0.0.1). Workers get their credentials from their environment, as on a
real cluster.

The job service retries no bundle and does not notice that an EXTERNAL worker died (it watches
Docker workers only): a job whose worker is killed hangs.
:func:`run_until_a_worker_is_killed` cancels it; running the job again is what a production
runner's retry amounts to (Flink restarts from its last checkpoint, Dataflow re-runs the work
item). Used by tests/integration/test_beam_portable.py and :mod:`reliability.beam_retry`.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import apache_beam as beam
import psutil
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.runner import PipelineState

from kinesis_core.local import DUMMY_ACCESS_KEY_ID, DUMMY_SECRET_ACCESS_KEY, LocalStream

ROOT = Path(__file__).resolve().parents[1]
WORKER_POOL = "apache_beam.runners.worker.worker_pool_main"
JOB_SERVICE = "apache_beam.runners.portability.local_job_service_main"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_for_port(port: int, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"exited with {proc.returncode}: {log.read_text()[-2000:]}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise RuntimeError(f"port {port} did not open in 60 s: {log.read_text()[-2000:]}")


class Service:
    """A Beam service in a process of its own: the worker pool or the job service. Its
    processes import from the repository and ``path`` (where the pipeline's DoFns are: they
    are pickled by reference)."""

    def __init__(self, module: str, tmp: Path, port_flag: str, path: Sequence[Path] = ()) -> None:
        self.port = _free_port()
        self.log = tmp / f"{module.rsplit('.', 1)[-1]}-{self.port}.log"
        env = dict(os.environ)
        # The pool starts workers as `python -c ...`: this interpreter, with the DoFns' modules
        # and the workers' credentials.
        env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *map(str, path)])
        env["AWS_ACCESS_KEY_ID"] = DUMMY_ACCESS_KEY_ID
        env["AWS_SECRET_ACCESS_KEY"] = DUMMY_SECRET_ACCESS_KEY
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(  # noqa: S603 - Beam's own modules, fixed arguments
                [sys.executable, "-m", module, f"{port_flag}={self.port}"],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        try:
            _wait_for_port(self.port, self.proc, self.log)
        except BaseException:
            self.stop()
            raise

    def workers(self) -> list[psutil.Process]:
        """The live SDK harness processes this pool started."""
        try:
            children = psutil.Process(self.proc.pid).children()
        except psutil.NoSuchProcess:
            return []
        return [c for c in children if c.is_running() and c.status() != psutil.STATUS_ZOMBIE]

    def stop(self) -> None:
        for child in self.workers():
            child.kill()
        self.proc.kill()
        self.proc.wait(timeout=30)


class Portable:
    """A worker pool and a job service, and pipelines that run on them."""

    def __init__(self, tmp: Path, path: Sequence[Path] = ()) -> None:
        self.tmp = tmp
        self.path = tuple(path)
        self.pool = Service(WORKER_POOL, tmp, "--service_port", self.path)
        self.jobs = self.job_service()

    def pipeline(
        self, stream: LocalStream, *extra: str, jobs: Service | None = None
    ) -> beam.Pipeline:
        flags = [
            "--runner=PortableRunner",
            f"--job_endpoint=127.0.0.1:{(jobs or self.jobs).port}",
            "--environment_type=EXTERNAL",
            f"--environment_config=127.0.0.1:{self.pool.port}",
            f"--kinesis_endpoint_url={stream.endpoint_url}",
            f"--kinesis_region_name={stream.client_config.region_name}",
            *extra,
        ]
        return beam.Pipeline(options=PipelineOptions(flags))

    def job_service(self) -> Service:
        """A job service of one job's own: one whose job hangs on a dead worker is killed."""
        return Service(JOB_SERVICE, self.tmp, "--port", self.path)

    def stop(self) -> None:
        self.jobs.stop()
        self.pool.stop()


def run(pipeline: beam.Pipeline, timeout: float = 240) -> None:
    """Run ``pipeline``; AssertionError unless it ends DONE within ``timeout`` seconds."""
    result = pipeline.run()
    state = result.wait_until_finish(duration=int(timeout * 1000))  # type: ignore[no-untyped-call]
    assert state == PipelineState.DONE, f"the job ended {state}"


def kill_a_worker_when(
    portable: Portable, ready: Callable[[], bool], timeout: float = 120
) -> psutil.Process:
    """SIGKILL a worker of the pool as soon as ``ready()``; the caller's job is running."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        workers = portable.pool.workers()
        if workers and ready():
            victim = workers[0]
            os.kill(victim.pid, signal.SIGKILL)
            while victim in portable.pool.workers():  # dead, or a zombie the pool never reaps
                time.sleep(0.05)
            return victim
        time.sleep(0.05)
    raise AssertionError("the job never got far enough to kill a worker mid-bundle")


def run_until_a_worker_is_killed(
    portable: Portable, pipeline_of: Callable[[Service], beam.Pipeline], ready: Callable[[], bool]
) -> None:
    """Start a job on a job service of its own, kill a worker mid-bundle, check the job does
    not finish (nothing retries the bundle), cancel it and stop that job service."""
    jobs = portable.job_service()
    try:
        result = pipeline_of(jobs).run()
        kill_a_worker_when(portable, ready)
        state = result.wait_until_finish(duration=3000)  # type: ignore[no-untyped-call]
        assert state not in (PipelineState.DONE, PipelineState.FAILED), state
        result.cancel()  # type: ignore[no-untyped-call]
    finally:
        jobs.stop()
