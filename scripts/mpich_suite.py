#!/usr/bin/env python3
"""Runs MPICH's test/mpi testlists on volley, one test at a time, as MPICH's runtests would.

usage: mpich_suite.py --tree DIR --volley PATH --dirs "d1 d2" --known FILE --out TSV --logs DIR
                      [--only dir/name[#k],...] [--timelimit S]

A test's id is dir/name#k, k counting the testlist lines of that name from 0 (pt2pt/sendrecv2#1
is the second sendrecv2 line). Judged as runtests does: by default exit 0 with a "No Errors" line
and no other output (a "Test Passed" line aside); resultTest=TestStatus: a non-zero exit;
TestStatusNoErrors: "No Errors" and a non-zero exit. Skipped as runtests skips by default: lines
marked xfail= (MPICH's own expected failures), more processes than --maxnp, mem= over 20 GB.

A test that fails is run once more: failing twice is a failure, failing once is reported as
flaky. A process of the test still alive after its launcher returned, or a /dev/shm entry it
left, is a failure too. The known-failures file lists, one per line, `id outcome reason...`
(outcome `notbuilt` or `fails`, or `varies` for a test whose outcome depends on memory it never
initialised: pass or fail both accepted); any other outcome than the listed one, a pass
included, makes the run exit 1.
"""
import argparse
import os
import re
import signal
import subprocess
import sys
import time

MAXMEM_GB = 20


def parse_testlist(tree, d):
    tests, seen = [], {}
    for line in open(os.path.join(tree, d, "testlist")):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        toks = line.split()
        name = toks[0]
        np_ = int(toks[1]) if len(toks) > 1 and toks[1].isdigit() else 2
        opt = {"args": [], "envs": []}
        for t in toks[2:]:
            m = re.match(r"([^=]+)=(.*)", t)
            if not m:
                continue
            k, v = m.groups()
            if k in ("arg", "env"):
                opt[k + "s"].append(v)
            else:
                opt[k] = v
        k = seen.get(name, 0)
        seen[name] = k + 1
        tests.append(dict(dir=d, name=name, np=np_, opt=opt, id=f"{d}/{name}#{k}"))
    return tests


def judge(kind, rc, out, timed_out):
    lines = out.splitlines()
    noerr = any(re.match(r"^\s*No [Ee]rrors\s*$", l) for l in lines)
    other = [l for l in lines
             if not re.match(r"^\s*No [Ee]rrors\s*$", l) and not re.match(r"^\s*Test Passed\s*$", l)]
    if kind in ("TestStatus", "TestErrFatal"):
        # The launcher's own time limit is a non-zero status like any other (runtests' rule).
        if timed_out and rc != 124:
            return "hang"
        return "pass" if rc != 0 else "fail(exit 0)"
    if timed_out:
        return "hang"
    if kind == "TestStatusNoErrors":
        return "pass" if (rc != 0 and noerr) else f"fail(exit {rc})"
    if rc == 0 and noerr and not other:
        return "pass"
    if rc == 0 and noerr:
        return "fail(extra output)"
    if rc < 0 or rc > 128:
        return f"crash(exit {rc})"
    return f"fail(exit {rc})"


def strays(prefix):
    """Processes still running a program from under `prefix`."""
    pids = []
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            exe = os.readlink(f"/proc/{p}/exe")
        except OSError:
            continue
        if exe.startswith(prefix):
            pids.append(int(p))
    return pids


def run_one(a, t, attempt):
    wd = os.path.join(a.tree, t["dir"])
    name, opt = t["name"], t["opt"]
    if not os.access(os.path.join(wd, name), os.X_OK):
        return "notbuilt", ""
    tl = int(opt["timeLimit"]) if opt.get("timeLimit", "").isdigit() else 180
    if a.timelimit:
        tl = a.timelimit
    env = dict(os.environ)
    env["MPIEXEC_TIMEOUT"] = str(tl)
    # The suite checks what MPI does, not this machine's tuning.
    env["VOLLEY_PROFILE"] = "none"
    for e in opt["envs"]:
        k, _, v = e.partition("=")
        env[k] = v
    cmd = [a.volley, "run", "-n", str(t["np"]), "--timeout", str(tl), f"./{name}"] + opt["args"]
    shm0 = set(os.listdir("/dev/shm"))
    t0 = time.time()
    timed_out = False
    p = subprocess.Popen(cmd, cwd=wd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         start_new_session=True)
    try:
        out, _ = p.communicate(timeout=tl + 30)
    except subprocess.TimeoutExpired:
        timed_out = True
        os.killpg(p.pid, signal.SIGKILL)
        out, _ = p.communicate()
    secs = time.time() - t0
    rc = p.returncode
    out = out.decode(errors="replace")
    if rc == 124:
        timed_out = True
    res = judge(opt.get("resultTest", ""), rc, out, timed_out)
    time.sleep(0.1)
    left = strays(os.path.realpath(a.tree) + "/")
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    shm = sorted(set(os.listdir("/dev/shm")) - shm0)
    extra = []
    if left:
        extra.append(f"processes left: {left}")
    if shm:
        extra.append(f"/dev/shm left: {shm}")
    if extra and res == "pass":
        res = "fail(" + "; ".join(extra) + ")"
    log = os.path.join(a.logs, t["dir"], f"{name}#{t['id'].split('#')[1]}.{attempt}.log")
    os.makedirs(os.path.dirname(log), exist_ok=True)
    with open(log, "w") as f:
        f.write(f"# cwd: {wd}\n# cmd: {' '.join(cmd)}\n# env: {' '.join(opt['envs'])}\n")
        f.write(f"# exit {rc}, {secs:.2f} s, {res}; {'; '.join(extra)}\n")
        f.write(out)
    return res, f"{secs:.1f}"


def load_known(path):
    known = {}
    for n, line in enumerate(open(path), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split(None, 2)
        if len(parts) < 3 or parts[1] not in ("notbuilt", "fails", "varies"):
            sys.exit(f"{path}:{n}: expected `dir/name#k notbuilt|fails|varies reason`")
        known[parts[0]] = (parts[1], parts[2])
    return known


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tree", required=True)
    ap.add_argument("--volley", required=True)
    ap.add_argument("--dirs", required=True)
    ap.add_argument("--known", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--logs", required=True)
    ap.add_argument("--only", default="")
    ap.add_argument("--timelimit", type=int, default=0)
    ap.add_argument("--maxnp", type=int, default=128, help="skip tests of more processes")
    a = ap.parse_args()
    a.volley = os.path.abspath(a.volley)
    known = load_known(a.known)
    tests = [t for d in a.dirs.split() for t in parse_testlist(a.tree, d)]
    if a.only:
        only = a.only.split(",")
        tests = [t for t in tests if t["id"] in only or t["id"].split("#")[0] in only]
    counts = {}
    unexpected, flaky = [], []
    t_start = time.time()
    with open(a.out, "w") as f:
        f.write("id\tnp\targs\tenvs\tresult\tsecs\texpected\n")
        for t in tests:
            opt = t["opt"]
            if opt.get("xfail"):
                res, secs = "skipped(xfail)", ""
            elif t["np"] > a.maxnp:
                res, secs = f"skipped(np {t['np']})", ""
            elif opt.get("mem") and float(opt["mem"]) > MAXMEM_GB:
                res, secs = f"skipped(mem {opt['mem']} GB)", ""
            else:
                res, secs = run_one(a, t, 1)
                if res not in ("pass", "notbuilt"):
                    again, secs2 = run_one(a, t, 2)
                    if again == "pass":
                        flaky.append(f"{t['id']}: {res}, then passed")
                        res, secs = "pass", secs2
            want = known.get(t["id"], (None, ""))[0]
            kind = "pass" if res == "pass" else "notbuilt" if res == "notbuilt" else \
                "skipped" if res.startswith("skipped") else "fails"
            counts[kind] = counts.get(kind, 0) + 1
            varies = want == "varies" and kind in ("pass", "fails")
            if kind != "skipped" and kind != (want or "pass") and not varies:
                if want:
                    unexpected.append(f"{t['id']}: {res}, but {a.known} says it {want}: "
                                      f"update the list")
                else:
                    unexpected.append(f"{t['id']}: {res} (log: {a.logs}/{t['dir']}/"
                                      f"{t['name']}#{t['id'].split('#')[1]}.1.log)")
            f.write("\t".join([t["id"], str(t["np"]), " ".join(opt["args"]),
                               " ".join(opt["envs"]), res, secs, want or "pass"]) + "\n")
            f.flush()
    ids = {t["id"] for t in tests}
    stale = [k for k in known if k not in ids and not a.only]
    for k in stale:
        unexpected.append(f"{k}: listed in {a.known} but no such test")
    listed = sum(1 for t in tests if t["id"] in known)
    print(f"mpich-suite: {len(tests)} tests in {time.time() - t_start:.0f} s: "
          f"{counts.get('pass', 0)} passed, {counts.get('fails', 0)} failed, "
          f"{counts.get('notbuilt', 0)} not built, {counts.get('skipped', 0)} skipped "
          f"(MPICH's xfail, more than {a.maxnp} processes); {listed} listed as known")
    for x in flaky:
        print(f"mpich-suite: flaky: {x}")
    for x in unexpected:
        print(f"mpich-suite: unexpected: {x}")
    sys.exit(1 if unexpected else 0)


if __name__ == "__main__":
    main()
