#!/usr/bin/env python3
"""A real Slurm cluster of a few "hosts" on this one machine, for the Slurm executor's tests
and for people trying it by hand (Debian 12's slurm-wlm 22.05 and munge).

Each host is a network namespace (`ip netns`) joined to a bridge in the root namespace by a
veth pair, with its own address and one slurmd (`slurmd -N hN`); slurmctld and munged run in
the root namespace. Fake GPUs are gres backed by empty
files (AutoDetect=off; Slurm 22.05 drops file-less GPUs); a
topology.conf puts h0 and h1 under leaf switch s0, h2 under s1, both under spine sp0.
No accounting: finished jobs go to the job-completion log (jobcomp/filetxt). Everything
lives under one temporary directory and is stopped and removed at the end, even on failure;
what a cluster whose owner was killed (SIGKILL) left behind is removed by the next start.

As a library (the tests):
    with SlurmCluster(hosts=3) as slurm:
        env = slurm.env          # SLURM_CONF for sbatch/squeue/..., through os.environ
        slurm.stop_host("h1")    # stop slurmd and kill the host's processes (node loss)
        slurm.start_host("h1")   # back
By hand:
    scripts/slurm_cluster.py [--hosts N]   starts it, prints `export SLURM_CONF=...`, and
                                           tears it down on Ctrl-C.
Needs root (namespaces, bridges) and the packages slurm-wlm, munge and iproute2.
"""
import argparse
import glob
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

GPUS_PER_HOST = 2
CPUS_PER_HOST = 4
MEMORY_MIB_PER_HOST = 4096
SLURMD_PORT = 6818  # each host has its own network namespace, so all share one port


def _run(*args, check=True):
    r = subprocess.run(list(args), capture_output=True, text=True)
    if check and r.returncode != 0:
        raise RuntimeError("%s: %s%s" % (" ".join(args), r.stdout, r.stderr))
    return r


def _free_port():
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


class SlurmCluster:
    def __init__(self, hosts=3, min_job_age=300):
        self.hosts = ["h%d" % i for i in range(hosts)]
        self.min_job_age = min_job_age
        tag = os.getpid() % 100000
        self.ns = {h: "koi%d-%s" % (tag, h) for h in self.hosts}
        self.bridge = "koibr%d" % tag
        self.subnet = self._free_subnet(os.getpid() % 250 + 1)
        self.addr = {h: "%s.%d" % (self.subnet, 11 + i) for i, h in enumerate(self.hosts)}
        self.root = None
        self.procs = {}  # name -> Popen (munged, slurmctld, slurmd-hN)
        self.env = None

    @staticmethod
    def _free_subnet(first):
        """10.213.X, the first X from `first` on that no interface of this machine uses (two test
        clusters at once must not share a subnet)."""
        used = _run("ip", "-4", "-o", "addr", "show").stdout
        for i in range(250):
            x = (first + i - 1) % 250 + 1
            if " 10.213.%d." % x not in used:
                return "10.213.%d" % x
        raise RuntimeError("no free 10.213.X/24 subnet for the Slurm test cluster")

    # ---- setup ---------------------------------------------------------------------------

    def __enter__(self):
        try:
            self.start()
        except BaseException:
            self.teardown()
            raise
        return self

    def __exit__(self, *exc):
        self.teardown()
        return False

    def start(self):
        reap_stale()
        self.root = tempfile.mkdtemp(prefix="koi-slurm-")
        with open(os.path.join(self.root, "owner"), "w") as f:
            f.write("%d %s %s\n" % (os.getpid(), self.bridge, " ".join(self.ns.values())))
        for d in ["state", "log", "munge"] + ["spool/" + h for h in self.hosts] + ["tmp/" + h for h in self.hosts]:
            os.makedirs(os.path.join(self.root, d))
        self._network()
        self._munge()
        self._config()
        self.env = dict(os.environ, SLURM_CONF=self.conf)
        self.procs["slurmctld"] = self._spawn("slurmctld", ["slurmctld", "-D", "-f", self.conf])
        for h in self.hosts:
            self.start_host(h)
        self.wait_idle(self.hosts)

    def _network(self):
        _run("ip", "link", "add", self.bridge, "type", "bridge")
        _run("ip", "addr", "add", self.subnet + ".1/24", "dev", self.bridge)
        _run("ip", "link", "set", self.bridge, "up")
        for i, h in enumerate(self.hosts):
            ns, outer, inner = self.ns[h], "%sv%d" % (self.bridge, i), "eth0"
            _run("ip", "netns", "add", ns)
            _run("ip", "link", "add", outer, "type", "veth", "peer", "name", inner, "netns", ns)
            _run("ip", "link", "set", outer, "master", self.bridge, "up")
            _run("ip", "-n", ns, "addr", "add", self.addr[h] + "/24", "dev", inner)
            _run("ip", "-n", ns, "link", "set", inner, "up")
            _run("ip", "-n", ns, "link", "set", "lo", "up")

    def _munge(self):
        key = os.path.join(self.root, "munge", "munge.key")
        with open(key, "wb") as f:
            f.write(os.urandom(1024))
        os.chmod(key, 0o400)
        os.chmod(os.path.join(self.root, "munge"), 0o755)
        self.munge_socket = os.path.join(self.root, "munge", "munge.sock")
        m = os.path.join(self.root, "munge")
        self.procs["munged"] = self._spawn("munged", [
            "munged", "--foreground", "--force", "--key-file=" + key, "--socket=" + self.munge_socket,
            "--pid-file=" + m + "/munged.pid", "--log-file=" + m + "/munged.log", "--seed-file=" + m + "/munge.seed"])
        self._wait(lambda: os.path.exists(self.munge_socket), "munged's socket")

    def _config(self):
        r = self.root
        self.conf = os.path.join(r, "slurm.conf")
        nodes = "\n".join(
            "NodeName=%s NodeAddr=%s CPUs=%d RealMemory=%d Gres=gpu:h100:%d State=UNKNOWN"
            % (h, self.addr[h], CPUS_PER_HOST, MEMORY_MIB_PER_HOST, GPUS_PER_HOST) for h in self.hosts)
        with open(self.conf, "w") as f:
            f.write("""ClusterName=koitest
SlurmctldHost={host}({ctl})
SlurmctldPort={ctl_port}
SlurmdPort={slurmd_port}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={munge}
SlurmUser=root
SlurmdUser=root
StateSaveLocation={r}/state
SlurmdSpoolDir={r}/spool/%n
TmpFS={r}/tmp/%n
SlurmctldPidFile={r}/slurmctld.pid
SlurmdPidFile={r}/slurmd-%n.pid
SlurmctldLogFile={r}/log/slurmctld.log
SlurmdLogFile={r}/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
GresTypes=gpu
TopologyPlugin=topology/tree
JobCompType=jobcomp/filetxt
JobCompLoc={r}/jobcomp.log
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
MpiDefault=none
SlurmdParameters=config_overrides
ReturnToService=2
SlurmdTimeout=8
SlurmctldTimeout=10
MessageTimeout=5
InactiveLimit=0
KillWait=5
MinJobAge={min_job_age}
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=1
{nodes}
PartitionName=koi Nodes=ALL Default=YES MaxTime=INFINITE State=UP
""".format(host=socket.gethostname().split(".")[0], ctl=self.subnet + ".1", ctl_port=_free_port(),
           slurmd_port=SLURMD_PORT, munge=self.munge_socket, r=r, min_job_age=self.min_job_age, nodes=nodes))
        # Slurm 22.05 drops a GPU gres without File= ("Removing file-less GPU"), so each fake
        # GPU is an empty file; AutoDetect=off keeps NVML away.
        os.makedirs(os.path.join(r, "dev"))
        for g in range(GPUS_PER_HOST):
            open(os.path.join(r, "dev", "gpu%d" % g), "w").close()
        with open(os.path.join(r, "gres.conf"), "w") as f:
            f.write("AutoDetect=off\n")
            for h in self.hosts:
                f.write("NodeName=%s Name=gpu Type=h100 File=%s/dev/gpu[0-%d]\n" % (h, r, GPUS_PER_HOST - 1))
        leaves = {"s0": self.hosts[:2], "s1": self.hosts[2:]}
        with open(os.path.join(r, "topology.conf"), "w") as f:
            for s, hs in leaves.items():
                if hs:
                    f.write("SwitchName=%s Nodes=%s\n" % (s, ",".join(hs)))
            f.write("SwitchName=sp0 Switches=%s\n" % ",".join(s for s, hs in leaves.items() if hs))

    def _spawn(self, name, argv):
        log = open(os.path.join(self.root, "log", name + ".out"), "w")
        p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                             env=dict(os.environ, SLURM_CONF=self.conf if hasattr(self, "conf") else ""))
        with open(os.path.join(self.root, "pids"), "a") as f:  # for reap_stale()
            f.write("%d\n" % p.pid)
        return p

    def _wait(self, ready, what, deadline_s=30):
        end = time.time() + deadline_s
        while time.time() < end:
            if ready():
                return
            time.sleep(0.1)
        raise RuntimeError("slurm test cluster: %s not ready after %ds; logs in %s" % (what, deadline_s, self.root))

    # ---- hosts ---------------------------------------------------------------------------

    def start_host(self, h):
        name = "slurmd-" + h
        # nsenter, not `ip netns exec`: that one remounts /sys, hiding the cgroup mounts
        # slurmd's cgroup plugin probes at start.
        self.procs[name] = self._spawn(name, ["nsenter", "--net=/run/netns/" + self.ns[h], "slurmd", "-D", "-N", h,
                                              "-f", self.conf])

    def stop_host(self, h):
        """Node loss: slurmd and every process in the host's namespace get SIGKILL."""
        p = self.procs.pop("slurmd-" + h, None)
        if p:
            _kill(p.pid)
            p.wait()
        for pid in _run("ip", "netns", "pids", self.ns[h], check=False).stdout.split():
            try:
                os.kill(int(pid), signal.SIGKILL)
            except OSError:
                pass

    def node_states(self):
        """{host: Slurm state} ("idle", "mixed", "down*", ...); {} while slurmctld does not answer."""
        r = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %T"], capture_output=True, text=True, env=self.env)
        if r.returncode != 0:
            return {}
        return dict(line.split() for line in r.stdout.splitlines() if line.strip())

    def wait_idle(self, hosts, deadline_s=30):
        self._wait(lambda: all(self.node_states().get(h) in ("idle", "mixed", "allocated") for h in hosts),
                   "nodes " + ",".join(hosts), deadline_s)

    # ---- teardown ------------------------------------------------------------------------

    def teardown(self):
        for h in list(self.ns):
            self.stop_host(h)
        for name, p in list(self.procs.items()):
            if p.poll() is None:
                _kill(p.pid)
                p.wait()
        self.procs.clear()
        for h, ns in self.ns.items():
            _run("ip", "netns", "del", ns, check=False)
        _run("ip", "link", "del", self.bridge, check=False)
        if self.root and not os.environ.get("KOI_KEEP_SLURM"):
            shutil.rmtree(self.root, ignore_errors=True)


def _kill(pid):
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass


def reap_stale():
    """Removes what a test cluster whose owner died without its teardown (a test killed by a
    timeout) left: daemons, namespaces with their processes, the bridge, the directory."""
    for root in glob.glob(os.path.join(tempfile.gettempdir(), "koi-slurm-*")):
        try:
            with open(os.path.join(root, "owner")) as f:
                owner, bridge, *namespaces = f.read().split()
        except (OSError, ValueError):
            continue
        if os.path.exists("/proc/%s" % owner):
            continue
        try:
            with open(os.path.join(root, "pids")) as f:
                for pid in f.read().split():
                    _kill(int(pid))
        except OSError:
            pass
        for ns in namespaces:
            for pid in _run("ip", "netns", "pids", ns, check=False).stdout.split():
                _kill(int(pid))
            _run("ip", "netns", "del", ns, check=False)
        _run("ip", "link", "del", bridge, check=False)
        shutil.rmtree(root, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description="Start a Slurm test cluster of N network-namespace hosts.")
    ap.add_argument("--hosts", type=int, default=3)
    args = ap.parse_args()
    with SlurmCluster(hosts=args.hosts) as c:
        print("export SLURM_CONF=%s   # hosts %s; Ctrl-C stops and removes it" % (c.conf, ", ".join(c.hosts)), flush=True)
        try:
            signal.pause()
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    sys.exit(main())
