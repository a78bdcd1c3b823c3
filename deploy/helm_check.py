#!/usr/bin/env python3
"""Offline checks of helm/cronshard, run by deploy/helm-check.sh inside its tool venv.

    helm_check.py check  CHART OUTDIR     lint + render every value set, validate every
                                          manifest, assert the chart's contracts, and make
                                          sure every broken value set fails with its message
    helm_check.py render CHART OUTDIR [-f VALUES]... [--set A=B]... [--name N]
                                          render one value set into OUTDIR (one file each)
    helm_check.py notes  CHART - [-f VALUES]... [--set A=B]...
                                          print the rendered NOTES.txt
    helm_check.py podenv CHART RENDERED_DIR --workload KIND/-SUFFIX --pod NAME
                                          the command and environment Kubernetes would give
                                          that pod (used by deploy/helm-run-local.sh)

No cluster and no `helm` binary: helm-python-sdk (Helm v4 compiled in) lints and renders,
kubernetes-validate --strict checks every manifest against the Kubernetes OpenAPI schemas.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import helm_python as helm
import jsonschema
import yaml

RELEASE = "demo"
NAMESPACE = "cronshard"
# The oldest Kubernetes the chart supports (Chart.yaml kubeVersion; the preStop "sleep"
# action needs 1.30) and the newest schema kubernetes-validate ships.
KUBE_VERSIONS = ["1.30", "1.37"]

# Value sets that must lint, render and validate: (name, values files, --set expressions).
GOOD = [
    ("defaults", ["default-values.yaml"], []),
    ("scheduler-5-replicas", ["default-values.yaml"], ["scheduler.replicas=5"]),
    ("existing-secret", ["existing-secret-values.yaml"], []),
    ("ingress-servicemonitor", ["ingress-monitoring-values.yaml"], []),
    ("worker-hpa-auth-off", ["autoscaling-values.yaml"], []),
]

# Value sets that must fail to render, with a piece of the message the user must see.
BAD = [
    ("scheduler.replicas=0", ["default-values.yaml"], ["scheduler.replicas=0"], "replicas"),
    ("missing secrets.databaseUrl", ["default-values.yaml"], ["secrets.databaseUrl="],
     "secrets.databaseUrl is required"),
    ("missing secrets.redisUrls", ["default-values.yaml"], ["secrets.redisUrls=null"],
     "secrets.redisUrls is required"),
    ("missing secrets.amqpUrl", ["default-values.yaml"], ["secrets.amqpUrl="],
     "secrets.amqpUrl is required"),
    ("no values at all", [], [], "is required"),
    ("auth on without a token", ["default-values.yaml"], ["secrets.apiTokens=null"],
     "secrets.apiTokens is empty"),
    ("databaseUrl not a Postgres URL", ["default-values.yaml"],
     ["secrets.databaseUrl=mysql://db/x"], "databaseUrl"),
    ("three Redis shards", ["default-values.yaml"],
     ["secrets.redisUrls={redis://a:6379,redis://b:6379,redis://c:6379}"], "redisUrls"),
    ("misspelt value scheduler.replica", ["default-values.yaml"], ["scheduler.replica=5"],
     "replica"),
    ("logFormat yaml", ["default-values.yaml"], ["config.logFormat=yaml"], "logFormat"),
    ("ingress on without hosts", ["default-values.yaml"], ["api.ingress.enabled=true"],
     "api.ingress.hosts is empty"),
    ("HPA min above max", ["default-values.yaml"],
     ["worker.autoscaling.enabled=true,worker.autoscaling.minReplicas=5,"
      "worker.autoscaling.maxReplicas=2"], "minReplicas"),
    ("namespace named like no label", ["default-values.yaml"], ["namespaces[0].name=Team_A"],
     "namespaces"),
    ("failures kept shorter than successes", ["default-values.yaml"],
     ["config.ledgerUnsuccessfulRetentionDays=30"], "config.ledgerUnsuccessfulRetentionDays (30) must be at least"),
]

# kubernetes-validate has no schema for the Prometheus Operator CRD: check the fields the
# chart writes against this subset of monitoring.coreos.com/v1 ServiceMonitor, strictly.
SERVICE_MONITOR_SCHEMA = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "additionalProperties": False,
    "properties": {
        "apiVersion": {"const": "monitoring.coreos.com/v1"},
        "kind": {"const": "ServiceMonitor"},
        "metadata": {
            "type": "object", "required": ["name"], "additionalProperties": False,
            "properties": {"name": {"type": "string"}, "namespace": {"type": "string"},
                           "labels": {"type": "object",
                                      "additionalProperties": {"type": "string"}}},
        },
        "spec": {
            "type": "object", "required": ["selector", "endpoints"], "additionalProperties": False,
            "properties": {
                "selector": {"type": "object", "additionalProperties": False,
                             "properties": {"matchLabels": {"type": "object",
                                            "additionalProperties": {"type": "string"}}}},
                "namespaceSelector": {"type": "object", "additionalProperties": False,
                                      "properties": {"matchNames": {"type": "array",
                                                     "items": {"type": "string"}},
                                                     "any": {"type": "boolean"}}},
                "endpoints": {
                    "type": "array", "minItems": 1,
                    "items": {"type": "object", "additionalProperties": False,
                              "required": ["port"],
                              "properties": {
                                  "port": {"type": "string"}, "path": {"type": "string"},
                                  "interval": {"type": "string",
                                               "pattern": "^(0|(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$"},
                                  "scrapeTimeout": {"type": "string",
                                                    "pattern": "^(0|(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$"}}},
                },
            },
        },
    },
}


class CheckFailed(Exception):
    pass


def values_for(chart_dir: Path, files: list[str], sets: list[str]) -> dict[str, Any]:
    """Merge values files then --set expressions, the way `helm -f … --set …` does."""
    values: dict[str, Any] = {}
    for name in files:
        path = Path(name) if os.path.isabs(name) or Path(name).exists() else chart_dir / "ci" / name
        merge(values, yaml.safe_load(path.read_text()) or {})
    for expr in sets:
        merge(values, helm.parse_set_string(expr))
    return values


def merge(dst: dict[str, Any], src: dict[str, Any]) -> None:
    for k, v in src.items():
        if isinstance(v, dict) and isinstance(dst.get(k), dict):
            merge(dst[k], v)
        else:
            dst[k] = v


def render(chart_dir: Path, values: dict[str, Any], name: str = RELEASE) -> dict[str, str]:
    chart = helm.Chart.load(str(chart_dir))
    # `helm install` validates the values against values.schema.json before rendering.
    chart.validate_schema(values)
    out = chart.render(values, name=name, namespace=NAMESPACE, is_install=True)
    return {p: m for p, m in out.items() if not p.endswith("NOTES.txt")}


def notes(chart_dir: Path, values: dict[str, Any]) -> str:
    chart = helm.Chart.load(str(chart_dir))
    out = chart.render(values, name=RELEASE, namespace=NAMESPACE, is_install=True)
    return next((m for p, m in out.items() if p.endswith("NOTES.txt")), "")


def write_manifests(manifests: dict[str, str], outdir: Path) -> list[tuple[Path, dict]]:
    """One file per document, so kubernetes-validate names each failing object."""
    outdir.mkdir(parents=True, exist_ok=True)
    docs: list[tuple[Path, dict]] = []
    for path, text in sorted(manifests.items()):
        for i, doc in enumerate(yaml.safe_load_all(text)):
            if not doc:
                continue
            kind = doc.get("kind", "unknown")
            name = doc.get("metadata", {}).get("name", "unnamed")
            f = outdir / f"{Path(path).stem}-{i}-{kind}-{name}.yaml"
            f.write_text(yaml.safe_dump(doc, sort_keys=False))
            docs.append((f, doc))
    return docs


def lint(chart_dir: Path, values: dict[str, Any]) -> list[str]:
    # Helm's lint mode turns `fail` into an INFO log line on stderr (render still fails on it,
    # which the broken value sets check); keep those lines out of the output.
    sys.stderr.flush()
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    try:
        report = helm.lint(str(chart_dir), values, strict=True, namespace=NAMESPACE)
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)
    msgs = [f"[{('?', 'INFO', 'WARNING', 'ERROR')[m['severity']]}] {m['path']}: {m['error']}"
            for m in report.get("messages", []) if m.get("severity", 0) >= 1]
    return msgs + [f"[ERROR] {e}" for e in report.get("errors", [])]


def validate(docs: list[tuple[Path, dict]], kv_bin: str) -> None:
    builtin = [str(f) for f, d in docs if d.get("kind") != "ServiceMonitor"]
    for kube in KUBE_VERSIONS:
        proc = subprocess.run([kv_bin, "--strict", "--quiet", "-k", kube, *builtin],
                              capture_output=True, text=True)
        out = (proc.stdout + proc.stderr).strip()
        if proc.returncode != 0 or "WARN" in out:
            raise CheckFailed(f"kubernetes-validate --strict -k {kube} failed:\n{out}")
    for f, d in docs:
        if d.get("kind") == "ServiceMonitor":
            try:
                jsonschema.validate(d, SERVICE_MONITOR_SCHEMA)
            except jsonschema.ValidationError as e:
                raise CheckFailed(f"{f.name}: ServiceMonitor: {e.message} at {list(e.path)}")


def by_kind(docs: list[tuple[Path, dict]], kind: str, suffix: str = "") -> list[dict]:
    return [d for _, d in docs if d["kind"] == kind and d["metadata"]["name"].endswith(suffix)]


def assert_contracts(name: str, values: dict[str, Any], docs: list[tuple[Path, dict]]) -> None:
    """What the issue asks of the chart, checked on every rendered value set."""
    def need(cond: bool, msg: str) -> None:
        if not cond:
            raise CheckFailed(f"{name}: {msg}")

    for _, d in docs:
        need(d["metadata"].get("namespace") == NAMESPACE,
             f"{d['kind']} {d['metadata']['name']}: metadata.namespace is the release namespace")
    sts = by_kind(docs, "StatefulSet", "-scheduler")
    need(len(sts) == 1, "exactly one scheduler StatefulSet")
    s = sts[0]["spec"]
    want = (values.get("scheduler") or {}).get("replicas", 3)
    need(s.get("replicas") == want, f"scheduler replicas {s['replicas']} != {want}")
    need(s.get("podManagementPolicy") == "Parallel", "podManagementPolicy Parallel")
    headless = by_kind(docs, "Service", "-scheduler")
    need(len(headless) == 1 and headless[0]["spec"].get("clusterIP") == "None"
         and headless[0]["metadata"]["name"] == s["serviceName"],
         "the StatefulSet's serviceName is a headless Service")
    pod = s["template"]["spec"]
    c = pod["containers"][0]
    env = {e["name"]: e for e in c["env"]}
    need(env["NODE_ID"].get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
         == "metadata.name", "NODE_ID comes from the pod name")
    need(pod["terminationGracePeriodSeconds"] >= 10, "scheduler termination grace >= 10 s")
    for _, d in docs:
        if d["kind"] in ("StatefulSet", "Deployment", "Job"):
            p = d["spec"]["template"]["spec"]
            need(p["securityContext"].get("runAsNonRoot") is True, f"{d['metadata']['name']}: runAsNonRoot")
            for ct in p["containers"]:
                sc = ct["securityContext"]
                need(sc.get("readOnlyRootFilesystem") is True and sc.get("allowPrivilegeEscalation") is False,
                     f"{d['metadata']['name']}: read-only root fs, no privilege escalation")
                need(bool(ct.get("resources", {}).get("requests")), f"{d['metadata']['name']}: resource requests")
    text_keys = {"CLUSTER_NAME", "LOG_FORMAT", "AMQP_QUEUE_TYPE", "CALLBACK_ALLOW_CIDRS", "AWS_REGION",
                 "AWS_ENDPOINT_URL_SQS", "CRON_RETRY_DELAY_MULTIPLIER"}
    for cm in by_kind(docs, "ConfigMap"):
        for k, v in cm["data"].items():
            need(k in text_keys or v.isdigit(), f"ConfigMap {k}={v!r} is not a plain integer")
    api = by_kind(docs, "Deployment", "-api")[0]["spec"]["template"]["spec"]["containers"][0]
    need(api["readinessProbe"]["httpGet"]["path"] == "/readyz"
         and api["livenessProbe"]["httpGet"]["path"] == "/healthz", "API probes /healthz and /readyz")
    # The schedulers and workers answer their probes on the metrics port.
    for kind, suffix in (("StatefulSet", "-scheduler"), ("Deployment", "-worker")):
        ct = by_kind(docs, kind, suffix)[0]["spec"]["template"]["spec"]["containers"][0]
        probes = {p: ct[p].get("httpGet", {}) for p in ("startupProbe", "livenessProbe", "readinessProbe")}
        need(all(g.get("port") == "metrics" for g in probes.values())
             and probes["startupProbe"].get("path") == probes["livenessProbe"].get("path") == "/healthz"
             and probes["readinessProbe"].get("path") == "/readyz",
             f"{suffix[1:]} probes httpGet /healthz and /readyz on the metrics port")
    # The API refuses at create time the callback addresses the workers refuse when they
    # connect: both read the same allow list.
    config_maps = {cm["metadata"]["name"]: cm["data"] for cm in by_kind(docs, "ConfigMap")}

    def env_of(container: dict) -> dict[str, str]:
        env = {}
        for ref in container.get("envFrom", []):
            env.update(config_maps.get(ref.get("configMapRef", {}).get("name"), {}))
        env.update({e["name"]: e.get("value") for e in container.get("env", [])})
        return env

    worker = by_kind(docs, "Deployment", "-worker")[0]["spec"]["template"]["spec"]["containers"][0]
    api_env, worker_env = env_of(api), env_of(worker)
    need("CALLBACK_ALLOW_CIDRS" in api_env and api_env.get("CALLBACK_ALLOW_CIDRS")
         == worker_env.get("CALLBACK_ALLOW_CIDRS"), "the API and the workers get the same CALLBACK_ALLOW_CIDRS")
    need(str(api_env.get("MIN_INTERVAL_MS", "")).isdigit(), "the API gets MIN_INTERVAL_MS")
    jobs = by_kind(docs, "Job", "-migrate")
    if (values.get("migrations") or {}).get("enabled", True):
        need(len(jobs) == 1 and jobs[0]["metadata"]["annotations"]["helm.sh/hook"]
             == "pre-install,pre-upgrade", "migrations run as a pre-install,pre-upgrade hook Job")
        # migrate maintains the ledger partitions: with the schedulers' retention, never the defaults.
        migrate_env = env_of(jobs[0]["spec"]["template"]["spec"]["containers"][0])
        scheduler_env = env_of(by_kind(docs, "StatefulSet", "-scheduler")[0]["spec"]["template"]["spec"]["containers"][0])
        for name in ("LEDGER_RETENTION_DAYS", "LEDGER_UNSUCCESSFUL_RETENTION_DAYS", "LEDGER_PARTITIONS_AHEAD_DAYS"):
            need(name in scheduler_env and migrate_env.get(name) == scheduler_env[name] == api_env.get(name),
                 f"the migrate Job, the API and the schedulers get the same {name}")
    secrets = by_kind(docs, "Secret")
    if values.get("existingSecret"):
        need(not secrets, "no Secret rendered with existingSecret")
    else:
        main = [d for d in secrets if "helm.sh/hook" not in (d["metadata"].get("annotations") or {})]
        need(len(main) == 1, "one Secret for the connection settings")
        auth = ((values.get("api") or {}).get("auth") or {}).get("enabled", True)
        need(bool(main[0]["stringData"]["API_TOKENS"]) == auth, "API_TOKENS set iff auth is on")


def check(chart_dir: Path, outdir: Path, kv_bin: str) -> int:
    failures = 0
    t0 = time.monotonic()
    for name, files, sets in GOOD:
        t = time.monotonic()
        values = values_for(chart_dir, files, sets)
        label = " ".join([*(f"-f ci/{f}" for f in files), *(f"--set {s}" for s in sets)]) or "(no values)"
        try:
            msgs = lint(chart_dir, values)
            bad = [m for m in msgs if not m.startswith("[INFO]")]
            if bad:
                raise CheckFailed("helm lint --strict:\n  " + "\n  ".join(bad))
            docs = write_manifests(render(chart_dir, values), outdir / name)
            validate(docs, kv_bin)
            assert_contracts(name, values, docs)
            kinds: dict[str, int] = {}
            for _, d in docs:
                kinds[d["kind"]] = kinds.get(d["kind"], 0) + 1
            summary = ", ".join(f"{n} {k}" for k, n in sorted(kinds.items()))
            print(f"  ok    {name:24} {label}\n        lint clean; {len(docs)} manifests valid "
                  f"(k8s {' and '.join(KUBE_VERSIONS)}, --strict): {summary} "
                  f"[{time.monotonic() - t:.1f}s]")
        except (CheckFailed, helm.HelmError) as e:
            failures += 1
            print(f"  FAIL  {name:24} {label}\n        {e}")
        except (KeyError, IndexError, TypeError) as e:
            # A rendered object lacks something the contract checks expect.
            failures += 1
            print(f"  FAIL  {name:24} {label}\n        rendered objects lack {e!r}")
    for name, files, sets, expect in BAD:
        values = values_for(chart_dir, files, sets)
        label = " ".join([*(f"-f ci/{f}" for f in files), *(f"--set {s}" for s in sets)]) or "(no values)"
        try:
            render(chart_dir, values)
        except helm.HelmError as e:
            msg = " ".join(str(e).split())
            if expect.lower() in msg.lower():
                lint_msgs = [m for m in lint(chart_dir, values) if not m.startswith("[INFO]")]
                print(f"  ok    refused: {name:34} {label}\n        -> {msg[:300]}"
                      f"\n        lint: {'reports it' if lint_msgs else 'silent (Helm lint ignores `fail`; render refuses it)'}")
                continue
            failures += 1
            print(f"  FAIL  {name}: failed, but the message lacks {expect!r}: {msg}")
            continue
        failures += 1
        print(f"  FAIL  {name}: {label} rendered without error; it must be refused")
    print(f"\nhelm chart check: {len(GOOD) + len(BAD) - failures} passed, {failures} failed "
          f"({len(GOOD)} value sets, {len(BAD)} broken value sets) in {time.monotonic() - t0:.1f}s"
          + (f"; manifests in {outdir}" if os.environ.get("HELM_CHECK_OUT") else
             " (HELM_CHECK_OUT=DIR keeps the rendered manifests)"))
    return 1 if failures else 0


def pod_env(outdir: Path, kind: str, suffix: str, pod: str) -> tuple[list[str], dict[str, str]]:
    """The command and environment Kubernetes would give the first container of the rendered
    workload `kind` named *`suffix`, as pod `pod`: env (value, fieldRef metadata.name,
    secretKeyRef, configMapKeyRef) over envFrom (ConfigMaps, Secrets), resolved from the
    rendered objects, as the kubelet does. A reference to an object that was not rendered
    (existingSecret) is an error unless it is optional."""
    objs = [yaml.safe_load(f.read_text()) for f in sorted(outdir.glob("*.yaml"))]
    def find(k: str, name: str) -> dict | None:
        return next((o for o in objs if o["kind"] == k and o["metadata"]["name"] == name), None)
    def data(k: str, name: str, optional: bool) -> dict[str, str]:
        o = find(k, name)
        if o is None:
            if optional:
                return {}
            raise CheckFailed(f"{k} {name} is referenced but not rendered")
        return {**(o.get("data") or {}), **(o.get("stringData") or {})}
    work = [o for o in objs if o["kind"] == kind and o["metadata"]["name"].endswith(suffix)]
    if len(work) != 1:
        raise CheckFailed(f"expected one {kind} *{suffix}, found {len(work)}")
    c = work[0]["spec"]["template"]["spec"]["containers"][0]
    env: dict[str, str] = {}
    for src in c.get("envFrom") or []:
        if "configMapRef" in src:
            ref = src["configMapRef"]
            d = data("ConfigMap", ref["name"], ref.get("optional", False))
        else:
            ref = src["secretRef"]
            d = data("Secret", ref["name"], ref.get("optional", False))
        env.update({src.get("prefix", "") + k: str(v) for k, v in d.items()})
    for e in c.get("env") or []:
        if "value" in e:
            env[e["name"]] = str(e["value"])
            continue
        vf = e["valueFrom"]
        if "fieldRef" in vf:
            path = vf["fieldRef"]["fieldPath"]
            if path != "metadata.name":
                raise CheckFailed(f"{e['name']}: fieldRef {path} not emulated")
            env[e["name"]] = pod
            continue
        kind_, ref = ("Secret", vf["secretKeyRef"]) if "secretKeyRef" in vf else ("ConfigMap", vf["configMapKeyRef"])
        d = data(kind_, ref["name"], ref.get("optional", False))
        if ref["key"] in d:
            env[e["name"]] = str(d[ref["key"]])
        elif not ref.get("optional", False):
            raise CheckFailed(f"{e['name']}: key {ref['key']} missing in {kind_} {ref['name']}")
    return [*(c.get("command") or []), *(c.get("args") or [])], env


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=["check", "render", "notes", "podenv"])
    ap.add_argument("chart", type=Path)
    ap.add_argument("outdir", type=Path)
    ap.add_argument("-f", "--values", action="append", default=[])
    ap.add_argument("--set", action="append", default=[])
    ap.add_argument("--name", default=RELEASE)
    ap.add_argument("--kubernetes-validate", default="kubernetes-validate")
    ap.add_argument("--workload", default="StatefulSet/-scheduler",
                    help="podenv: KIND/NAME-SUFFIX of the workload")
    ap.add_argument("--pod", default="", help="podenv: the pod name (fieldRef metadata.name)")
    a = ap.parse_args()
    helm.disable_logging()
    if a.mode == "check":
        return check(a.chart, a.outdir, a.kubernetes_validate)
    if a.mode == "podenv":
        # OUTDIR holds rendered manifests; prints the command, then KEY=VALUE lines, NUL-separated.
        kind, suffix = a.workload.split("/", 1)
        try:
            cmd, env = pod_env(a.outdir, kind, suffix, a.pod)
        except CheckFailed as e:
            print(f"podenv: {e}", file=sys.stderr)
            return 1
        sys.stdout.write("\0".join([" ".join(cmd), *(f"{k}={v}" for k, v in sorted(env.items()))]) + "\0")
        return 0
    values = values_for(a.chart, a.values, a.set)
    if a.mode == "notes":
        print(notes(a.chart, values))
        return 0
    try:
        docs = write_manifests(render(a.chart, values, a.name), a.outdir)
    except helm.HelmError as e:
        print(f"render failed: {e}", file=sys.stderr)
        return 1
    for f, _ in docs:
        print(f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
