"""test_deploy.py: the container image and the DaemonSet, checked without Docker or a cluster.

- deploy/Dockerfile passes hadolint, and every file it COPYs from the context exists;
- deploy/k8s/daemonset.yaml passes kubernetes-validate --strict (the API schemas);
- gpukvd starts with the image's ENTRYPOINT + CMD and with the DaemonSet's arguments (paths moved
  into a temporary directory, the host backend where no GPU is), the DaemonSet's probe command
  answers, and its metrics port serves /metrics to the token, as a scrape would.

Usage: python test_deploy.py GPUKVD GPUKV  (hadolint and kubernetes-validate next to python).
Exit 77 when the tools are missing.
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOCKERFILE = os.path.join(ROOT, "deploy", "Dockerfile")
MANIFEST = os.path.join(ROOT, "deploy", "k8s", "daemonset.yaml")
TOOLS = os.path.dirname(sys.executable)
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


def tool(name):
    path = os.path.join(TOOLS, name)
    return path if os.path.exists(path) else shutil.which(name)


def instructions(path):
    """The Dockerfile's instructions as (KEYWORD, text), continuation lines joined."""
    out, cur = [], ""
    for line in open(path, encoding="utf-8"):
        s = line.rstrip("\n")
        if not cur and (not s.strip() or s.lstrip().startswith("#")):
            continue
        cur += s.rstrip("\\").strip() + " "
        if not s.endswith("\\"):
            word, _, rest = cur.strip().partition(" ")
            out.append((word.upper(), rest))
            cur = ""
    return out


def lint():
    hadolint, validate = tool("hadolint"), tool("kubernetes-validate")
    if not hadolint or not validate:
        print("hadolint or kubernetes-validate missing: skipped")
        sys.exit(77)
    r = subprocess.run([hadolint, DOCKERFILE], capture_output=True, text=True)
    check(r.returncode == 0, "hadolint deploy/Dockerfile " + r.stdout.strip())
    r = subprocess.run([validate, "--strict", MANIFEST], capture_output=True, text=True)
    check(r.returncode == 0 and "passed for resource daemonset/gpukvd" in r.stdout,
          "kubernetes-validate --strict deploy/k8s/daemonset.yaml " + r.stdout + r.stderr)
    cluster = os.path.join(ROOT, "deploy", "k8s", "cluster.yaml")
    r = subprocess.run([validate, "--strict", cluster], capture_output=True, text=True)
    check(r.returncode == 0 and "daemonset/gpukvd-cluster" in r.stdout
          and "statefulset/gpukv-etcd" in r.stdout,
          "kubernetes-validate --strict deploy/k8s/cluster.yaml " + r.stdout + r.stderr)
    for word, rest in instructions(DOCKERFILE):
        if word == "COPY" and "--from=" not in rest:
            src = rest.split()[0]
            check(os.path.exists(os.path.join(ROOT, src)), "COPY source exists: " + src)


def image_command():
    found = {}
    for word, rest in instructions(DOCKERFILE):
        if word in ("ENTRYPOINT", "CMD"):
            found[word] = json.loads(rest)
    return found["ENTRYPOINT"] + found["CMD"]


def daemonset():
    import yaml  # kubernetes-validate's dependency

    docs = [d for d in yaml.safe_load_all(open(MANIFEST, encoding="utf-8")) if d]
    ds = next(d for d in docs if d["kind"] == "DaemonSet")
    return ds["spec"]["template"]["spec"]["containers"][0]


def moved(args, tmp):
    """args with the container's paths in tmp, the host backend where no GPU is, and a free
    metrics port."""
    out = []
    for a in args:
        a = a.replace("/run/gpukv", tmp).replace("/etc/gpukv", tmp)
        if a == "cuda" and os.environ.get("GKV_TEST_BACKEND", "host") != "cuda":
            a = "host"
        if a.endswith(":9187"):
            a = a[: -len("9187")] + "0"
        out.append(a)
    return out


def run_daemon(gpukvd, gpukv, args, tmp, env, probe=None, token=None):
    """Starts gpukvd with args, checks that it answers (probe, or gpukv ping), scrapes its
    metrics if it has a metrics port, stops it with SIGTERM."""
    log = open(os.path.join(tmp, "gpukvd.log"), "w")
    p = subprocess.Popen([gpukvd] + args, stdout=log, stderr=log, env=env)
    sock = os.path.join(tmp, "gpukv.sock")
    probe = probe or [gpukv, "-s", sock, "ping"]
    answered = False
    for _ in range(200):
        if p.poll() is not None:
            break
        if subprocess.run(probe, capture_output=True, env=env).returncode == 0:
            answered = True
            break
        time.sleep(0.05)
    check(answered, "gpukvd %s answers %s" % (" ".join(args), " ".join(probe)))
    if answered and "--metrics-listen" in args:
        info = subprocess.run([gpukv, "-s", sock, "info"], capture_output=True, text=True, env=env)
        addr = next(l.split(":", 1)[1].strip() for l in info.stdout.splitlines()
                    if l.startswith("metrics_listen:"))
        port = addr.rsplit(":", 1)[1]
        req = urllib.request.Request("http://127.0.0.1:%s/metrics" % port,
                                     headers={"Authorization": "Bearer " + token} if token else {})
        try:
            body = urllib.request.urlopen(req, timeout=10).read().decode()
        except urllib.error.URLError as e:
            body = str(e)
        check("gpukv_commands_total" in body, "the metrics port answers a scrape with the token")
        try:
            urllib.request.urlopen("http://127.0.0.1:%s/metrics" % port, timeout=10)
            check(False, "a scrape without the token is refused")
        except urllib.error.HTTPError as e:
            check(e.code == 401, "a scrape without the token is refused (%d)" % e.code)
    p.send_signal(signal.SIGTERM)
    try:
        rc = p.wait(timeout=20)
    except subprocess.TimeoutExpired:
        p.kill()
        rc = p.wait()
    check(rc == 0, "gpukvd exits 0 on SIGTERM (%d)" % rc)
    log.close()
    if failures:
        print(open(os.path.join(tmp, "gpukvd.log")).read())


def main():
    gpukvd, gpukv = sys.argv[1], sys.argv[2]
    lint()
    env = dict(os.environ)
    env.pop("GPUKV_TOKEN", None)
    env.pop("GPUKV_URL", None)
    # The image: its ENTRYPOINT and CMD, gpukvd found on PATH as in the image.
    with tempfile.TemporaryDirectory(prefix="gkv-deploy-") as tmp:
        os.chmod(tmp, 0o700)
        cmd = image_command()
        check(cmd[0] == "gpukvd", "the image's entrypoint is gpukvd")
        run_daemon(gpukvd, gpukv, moved(cmd[1:], tmp), tmp, env)
    # The DaemonSet: its container's arguments, environment, probe and token.
    c = daemonset()
    with tempfile.TemporaryDirectory(prefix="gkv-deploy-") as tmp:
        os.chmod(tmp, 0o700)
        token = "deploy-test-token-0123456789abcdef"
        with open(os.path.join(tmp, "token"), "w") as f:
            f.write(token + "\n")
        for e in c.get("env", []):
            env[e["name"]] = moved([e["value"]], tmp)[0]
        args = moved(image_command()[1:3] + c["args"], tmp)
        probe = moved(c["livenessProbe"]["exec"]["command"], tmp)
        probe[0] = gpukv
        run_daemon(gpukvd, gpukv, args, tmp, env, probe=probe, token=token)
    print("deploy: %d failed" % len(failures))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
