"""Peak memory of the README's RLlib example: the driver, each env-runner actor, each learner actor, in total.

The first python block under README.md's ``## RLlib`` heading runs as written (SmolLM2-135M from
``~/.cache/ecpo/models/smollm2-135m-instruct``, or ``--model``) in a fresh process in a temporary folder (its
``save_to_path("ckpt")`` writes there). A sampler polls every process of that driver's tree (the driver, the
Ray processes it starts, and the workers raylet forks: an actor's process title is ``ray::<ActorClass>...``)
every ``--interval`` seconds and keeps each process's peak resident set (RSS) and the highest simultaneous
sum over the tree. Printed, and written to ``--out`` as JSON:

- ``driver``: the driver's peak RSS (with ``num_learners=0`` the learner, its optimizer and its KL
  reference live here);
- ``runners``: each ``LLMEnvRunner`` actor's peak RSS; ``learners``: each learner actor's (none at
  ``num_learners=0``); ``ray_other``: Ray's own processes (gcs, raylet, dashboard, idle workers) together;
- ``total_peak``: the highest sum over all of them at one sampling instant, of RSS (a page shared by several
  processes, e.g. weights in Ray's object store, counted in each) and of PSS (each shared page split between
  its mappers: what the machine had to hold).

    python -m benchmarks.rllib_memory --label before --out benchmarks/results/rllib_memory_before.json
    python -m benchmarks.rllib_memory --model /path/to/tiny --interval 0.2   # quick check
"""

from __future__ import annotations

import json
import os
import platform
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from benchmarks import ArgumentParser
from ecpo_train.files.atomic import write_text

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
README_MODEL = "~/.cache/ecpo/models/smollm2-135m-instruct"
MB = 1 << 20
# The run's own Ray head (``ray start --head`` in a private --temp-dir, which other sessions' ray.init() do not find).
# Its raylet waits a fixed 15 s for each port file of the dashboard and runtime-env agents, and aborts after ("Timed
# out waiting for file .../dashboard_agent_listen_port_..."): on a loaded 2-core machine a niced agent can take 30 s
# to import. The benchmark writes those files itself, with what the agents of a dashboard-less head write (-1: that
# service is off) and the runtime-env agent's port, given on the command line; an agent that comes up later writes
# the same values over them.
AGENT_PORT_FILES = {"dashboard_agent_listen_port": "-1", "metrics_agent_port": "-1", "metrics_export_port": "-1"}


def readme_example(checkout: Path = ROOT) -> str:
    """The README's RLlib example: the first python block under '## RLlib' of ``checkout``'s README.md."""
    section = (checkout / "README.md").read_text().split("\n## RLlib\n", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.DOTALL).group(1)


def role(title: str, is_driver: bool) -> str:
    """Which part of the run a process is, from its title (Ray names actor workers ``ray::<Class>.<method>``)."""
    if is_driver:
        return "driver"
    if "EnvRunner" in title:
        return "runner"
    if "Learner" in title:
        return "learner"
    return "ray_other"


class TreeSampler:
    """Each process's peak RSS in the driver's tree and the Ray head's (daemons whose command line holds ``marker``,
    and their children: the actors' workers), and the peak of their sum."""

    def __init__(self, root_pid: int, marker: str) -> None:
        import psutil

        self.psutil = psutil
        self.root = psutil.Process(root_pid)
        self.marker = marker  # in the command line of every daemon of the run's private Ray head
        self.peaks: dict[int, int] = {}
        self.pss_peaks: dict[int, int] = {}
        self.roles: dict[int, str] = {}
        self.titles: dict[int, str] = {}
        self.paths: dict[int, str] = {}  # each process's PYTHONPATH: which checkout its code came from
        self.seen: dict[int, object] = {}  # psutil.Process of every process of the tree
        self.total_peak = 0
        self.total_pss_peak = 0
        self.samples = 0
        self.started = time.time()
        self.timeline: list[dict] = []  # seconds since start, summed RSS (MB) by role: where in the run memory peaks

    def sample(self) -> None:
        roots = [self.root]
        for process in self.psutil.process_iter(["cmdline"]):
            if self.marker in " ".join(process.info["cmdline"] or []):
                roots.append(process)
        processes: dict[int, object] = {}
        for root in roots:
            try:
                processes.update({p.pid: p for p in (root, *root.children(recursive=True))})
            except self.psutil.NoSuchProcess:
                continue
        total = total_pss = 0
        by_role = {"driver": 0, "runner": 0, "learner": 0, "ray_other": 0}
        for process in processes.values():
            try:
                info = process.memory_full_info()  # pss: shared pages (Ray's object store) split between mappers
                rss, pss = info.rss, info.pss
                title = " ".join(process.cmdline())[:120] or process.name()
                if process.pid not in self.paths:
                    self.paths[process.pid] = process.environ().get("PYTHONPATH", "")
                    self.seen[process.pid] = process
            except (self.psutil.NoSuchProcess, self.psutil.AccessDenied, self.psutil.ZombieProcess):
                continue
            total, total_pss = total + rss, total_pss + pss
            pid = process.pid
            self.peaks[pid] = max(self.peaks.get(pid, 0), rss)
            self.pss_peaks[pid] = max(self.pss_peaks.get(pid, 0), pss)
            found = role(title, pid == self.root.pid)
            if found != "ray_other" or pid not in self.roles:  # an actor's title is set after its worker starts
                self.roles[pid], self.titles[pid] = found, title
            by_role[self.roles[pid]] += rss
        self.total_peak = max(self.total_peak, total)
        self.total_pss_peak = max(self.total_pss_peak, total_pss)
        self.samples += 1
        self.timeline.append({"t": round(time.time() - self.started, 1), "unix": round(time.time(), 1),
                              **{role: round(rss / MB) for role, rss in by_role.items()},
                              "pss_total": round(total_pss / MB)})

    def stop_leftovers(self) -> list[int]:
        """Stop the run's processes still running after the driver ended (the private Ray head and its workers;
        ``is_running`` checks each is still the process seen)."""
        left = [p for pid, p in self.seen.items() if pid != self.root.pid and p.is_running()]
        for process in left:
            process.terminate()
        _, alive = self.psutil.wait_procs(left, timeout=10)
        for process in alive:
            process.kill()
        return [p.pid for p in left]

    def summary(self) -> dict:
        by_role: dict[str, list[dict]] = {"driver": [], "runner": [], "learner": [], "ray_other": []}
        for pid, peak in sorted(self.peaks.items()):
            by_role[self.roles[pid]].append({"pid": pid, "title": self.titles[pid], "peak_rss_mb": peak / MB,
                                             "peak_pss_mb": self.pss_peaks[pid] / MB,
                                             "pythonpath": self.paths.get(pid, "")})
        return {
            "driver_peak_rss_mb": sum(p["peak_rss_mb"] for p in by_role["driver"]),
            "runner_peak_rss_mb": [p["peak_rss_mb"] for p in by_role["runner"]],
            "learner_peak_rss_mb": [p["peak_rss_mb"] for p in by_role["learner"]],
            "ray_other_peak_rss_mb": sum(p["peak_rss_mb"] for p in by_role["ray_other"]),
            "total_peak_rss_mb": self.total_peak / MB,
            "total_peak_pss_mb": self.total_pss_peak / MB,
            "sum_of_process_peaks_mb": sum(self.peaks.values()) / MB,
            "samples": self.samples,
            "processes": by_role,
            "timeline": self.timeline,
        }


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    for sock in sockets:
        sock.bind(("127.0.0.1", 0))
    ports = [sock.getsockname()[1] for sock in sockets]
    for sock in sockets:
        sock.close()
    return ports


def write_agent_port_files(ray_dir: Path, values: dict[str, str], wait_s: float = 600.0) -> None:
    """Write each ``<name>_<node id>`` port file of the head's session that is not there yet (see
    ``AGENT_PORT_FILES``); the node id is the one in the GCS's own port file, the first one written."""
    deadline = time.time() + wait_s
    while time.time() < deadline:
        found = sorted(ray_dir.glob("session_*/gcs_server_port_*"))
        if found:
            node_id = found[0].name.removeprefix("gcs_server_port_")
            for name, value in values.items():
                target = found[0].parent / f"{name}_{node_id}"
                if not target.exists():
                    write_text(target, value)
            return
        time.sleep(0.1)


def run_example(model: str, interval: float, timeout: float, checkout: Path = ROOT) -> dict:
    """Run ``checkout``'s README example on ``checkout``'s code (first on the ``PYTHONPATH`` of the driver and of
    the Ray head, whose workers inherit it) in a fresh driver process, connected to a private Ray head
    (``RAY_ADDRESS``: the example's own ``build_algo()`` finds it), and sample both until the driver exits."""
    code = ("import ecpo_train; print('ecpo_train from', ecpo_train.__file__, flush=True)\n"
            + readme_example(checkout))
    if model != README_MODEL:
        code = code.replace(README_MODEL, model)
    with tempfile.TemporaryDirectory(prefix="rmem-") as folder:
        ray_dir = Path(folder) / "ray"
        gcs_port, runtime_env_port = free_ports(2)
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(checkout), os.environ.get("PYTHONPATH")])),
                   RAY_AUTH_MODE="disabled")  # `ray start` turns token authentication on; ray.init's own head has none
        started = time.perf_counter()
        writer = threading.Thread(target=write_agent_port_files, daemon=True,
                                  args=(ray_dir, AGENT_PORT_FILES | {"runtime_env_agent_port": str(runtime_env_port)}))
        writer.start()
        head = subprocess.run([str(Path(sys.executable).with_name("ray")), "start", "--head", "--num-cpus=2",
                               "--include-dashboard=false", f"--temp-dir={ray_dir}",
                               f"--port={gcs_port}", f"--runtime-env-agent-port={runtime_env_port}"],
                              env=env, capture_output=True, text=True, check=False)
        env["RAY_ADDRESS"] = f"127.0.0.1:{gcs_port}"
        with open(Path(folder) / "driver.log", "w") as log:
            log.write(head.stdout[-2000:] + head.stderr[-2000:])
            log.flush()
            driver = subprocess.Popen([sys.executable, "-c", code], cwd=folder, stdout=log, stderr=subprocess.STDOUT,
                                      env=env)
            sampler = TreeSampler(driver.pid, str(ray_dir))
            timed_out = False
            while driver.poll() is None:
                sampler.sample()
                if time.perf_counter() - started > timeout:
                    timed_out = True
                    driver.kill()
                    driver.wait()
                    break
                time.sleep(interval)
        seconds = time.perf_counter() - started
        sampler.sample()  # the head's daemons, should the driver have ended before the first sample
        leftovers = sampler.stop_leftovers()
        tail = (Path(folder) / "driver.log").read_text()[-3000:]
    return {"returncode": driver.returncode, "timed_out": timed_out, "seconds": seconds, "ray_start_returncode": head.returncode,
            "driver_log_tail": tail, "ray_processes_stopped": len(leftovers)} | sampler.summary()


def main(argv: list[str] | None = None) -> None:
    parser = ArgumentParser(__spec__.name, description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=README_MODEL, help="model folder in place of the README's (default: "
                                                              "the README's own)")
    parser.add_argument("--checkout", default=str(ROOT), help="the source tree whose README example and code run "
                                                               "(e.g. `git archive` of an older commit; default: this one)")
    parser.add_argument("--label", default="", help="what this measurement is (e.g. before / after)")
    parser.add_argument("--commit", default=None, help="the checkout measured (default: git HEAD)")
    parser.add_argument("--interval", type=float, default=0.5, help="seconds between samples")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds before the driver is stopped (the "
                                                                         "peaks so far are still written)")
    parser.add_argument("--machine", default="2 shared CPU cores, 24 GiB RAM (beside a ~9 GB training run)")
    parser.add_argument("--out", default=str(RESULTS / "rllib_memory.json"))
    args = parser.parse_args(argv)

    measured = run_example(args.model, args.interval, args.timeout, Path(args.checkout))
    commit = args.commit or subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=args.checkout,
                                           capture_output=True, text=True, check=False).stdout.strip()
    report = {"label": args.label, "commit": commit, "model": args.model, "machine": args.machine,
              "platform": platform.platform(), "interval_s": args.interval,
              "ray": "a private head: ray start --head --num-cpus=2 --include-dashboard=false; agent port files "
                     "written by the benchmark (AGENT_PORT_FILES)",
              "example": "README.md, first python block under '## RLlib' (2 env runners, num_learners=0)",
              **measured}
    print(f"{args.label or 'run'} at {commit}: exit {measured['returncode']} after {measured['seconds']:.0f} s")
    print(f"  driver (learner inside) {measured['driver_peak_rss_mb']:8.0f} MB")
    for k, mb in enumerate(measured["runner_peak_rss_mb"], 1):
        print(f"  runner {k}                {mb:8.0f} MB")
    for k, mb in enumerate(measured["learner_peak_rss_mb"], 1):
        print(f"  learner {k}               {mb:8.0f} MB")
    print(f"  other Ray processes     {measured['ray_other_peak_rss_mb']:8.0f} MB")
    print(f"  total (simultaneous)    {measured['total_peak_rss_mb']:8.0f} MB RSS, "
          f"{measured['total_peak_pss_mb']:.0f} MB PSS (shared pages counted once)")
    if measured["returncode"] != 0:
        print(measured["driver_log_tail"])
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    write_text(Path(args.out), json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
