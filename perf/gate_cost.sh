#!/usr/bin/env bash
# What the in-server gate costs the API server per create: sequential server-side dry-run creates of a ~600 KB GPU
# Job in a bronze namespace of the sample policy, with no gate, with the validating half, and with both halves.
# Prints the wall time per create and, when the API server runs on this machine (the e2e harness's throwaway
# control plane), its own CPU time per create less its background rate (measured for 5 s before each row), which
# other load on the machine inflates far less than the wall time (it still does some: run it on a quiet machine).
#
#   cargo build -q -p tiergate-e2e --bin control-plane
#   (target/debug/control-plane up --env-file /tmp/gate-cp.env > /tmp/gate-cp.out 2>&1 &)
#   until [ -s /tmp/gate-cp.env ]; do sleep 2; done; set -a; . /tmp/gate-cp.env; set +a
#   perf/gate_cost.sh              # CREATES=10 per kind of Job and phase
#
# Needs KUBECONFIG (a cluster where it may create a namespace tiergate-gate-cost-<time>-<pid>, the TierGateParameters
# CRD and the gate's cluster-scoped objects of the sample: the policies `tiergate-gate-default`, the bronze bindings
# and parameters `tiergate-gate-bronze`; it deletes all of them on exit), kubectl, curl and python3. For the cost
# per create of a typical Job, gate on and off paired request by request, see perf/gate_latency.py.
set -euo pipefail

cd "$(dirname "$0")/.."
CREATES=${CREATES:-10}
NAMESPACE=tiergate-gate-cost-$(date +%s)-$$
: "${KUBECONFIG:?set KUBECONFIG (e.g. from the e2e harness: target/debug/control-plane up --env-file FILE)}"
for tool in kubectl curl python3; do
    command -v "$tool" > /dev/null || { echo "gate_cost: $tool is not on PATH" >&2; exit 2; }
done
WORK=$(mktemp -d -t tiergate-gate-cost-XXXXXX)
PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
cleanup() {
    [ -n "${PROXY:-}" ] && kill "$PROXY" 2> /dev/null || true
    kubectl delete --ignore-not-found --wait=false namespace "$NAMESPACE" > /dev/null 2>&1 || true
    for kind in mutatingadmissionpolicybinding validatingadmissionpolicybinding tiergateparameters; do
        kubectl delete --ignore-not-found "$kind" tiergate-gate-bronze > /dev/null 2>&1 || true
    done
    for kind in mutatingadmissionpolicy validatingadmissionpolicy; do
        kubectl delete --ignore-not-found "$kind" tiergate-gate-default > /dev/null 2>&1 || true
    done
    rm -rf "$WORK"
}
trap cleanup EXIT

cargo build -q -p tiergate --bin tiergate
target/debug/tiergate crd | kubectl apply --server-side -f - > /dev/null
kubectl wait --for=condition=Established crd/tiergateparameters.tiergate.io --timeout=60s > /dev/null
target/debug/tiergate render --policy samples/kubenexus/policy.yaml --cluster samples/kubenexus/cluster.yaml \
    --gate validate-and-mutate -o json > "$WORK/render.json" 2> /dev/null
python3 - "$WORK" "$NAMESPACE" << 'EOF'
import json, sys
work, namespace = sys.argv[1], sys.argv[2]
items = json.load(open(f"{work}/render.json"))["items"]
def bronze(kind):
    # One program per policy; the bindings and parameters are per tier.
    (item,) = [i for i in items if i["kind"] == kind and i["metadata"]["name"] in
               ("tiergate-gate-default", "tiergate-gate-bronze")]
    return item
for kind in ["ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", "MutatingAdmissionPolicy",
             "MutatingAdmissionPolicyBinding", "TierGateParameters"]:
    json.dump(bronze(kind), open(f"{work}/{kind}.json", "w"))
(queue,) = {i["metadata"]["name"] for i in items if i["kind"] == "LocalQueue" and "bronze" in i["metadata"]["name"]}
env = [{"name": f"COST_VAR_{index:05}", "value": "x" * 80} for index in range(5000)]
def job(name, selector, labels, suspend):
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": namespace, "labels": labels},
            "spec": {"suspend": suspend, "template": {"spec": {"restartPolicy": "Never", "nodeSelector": selector,
                "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10", "env": env,
                                "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}}}
# Confined as the webhook leaves it (every phase admits it), and plain (the validating half refuses it, the
# mutating half confines it).
json.dump(job("confined", {"gpu.nvidia.com/class": "l4"}, {"kueue.x-k8s.io/queue-name": queue}, True),
          open(f"{work}/confined.json", "w"))
json.dump(job("plain", {}, {}, False), open(f"{work}/plain.json", "w"))
# Another tier's class (the tenant-flood attack): refused by the validating half, not matched by the mutating half.
json.dump(job("foreign", {"gpu.nvidia.com/class": "h100"}, {"kueue.x-k8s.io/queue-name": queue}, True),
          open(f"{work}/foreign.json", "w"))
EOF
kubectl create namespace "$NAMESPACE" > /dev/null
kubectl label namespace "$NAMESPACE" tenant.kubenexus.io/tier=bronze > /dev/null
kubectl proxy --port="$PORT" > "$WORK/proxy.log" 2>&1 &
PROXY=$!
URL="http://127.0.0.1:$PORT/apis/batch/v1/namespaces/$NAMESPACE/jobs?dryRun=All"
until curl -s -o /dev/null "http://127.0.0.1:$PORT/healthz"; do sleep 0.2; done

# The local API server whose kubeconfig this is (the harness keeps both in one directory), if any.
APISERVER=$(pgrep -f "kube-apiserver.*$(dirname "$KUBECONFIG")" | head -1 || true)
cpu_ticks() { if [ -n "$APISERVER" ]; then awk '{print $14 + $15}' "/proc/$APISERVER/stat"; else echo 0; fi; }
create() { curl -s -o "$WORK/answer.json" -w '%{http_code} %{time_total}' -X POST -H 'Content-Type: application/json' \
    --data-binary "@$WORK/$1.json" "$URL"; }

# Waits until the plain Job gets the answer `code` (the API server compiles a new policy asynchronously).
await_plain() {
    for _ in $(seq 1 300); do
        [ "$(create plain | cut -d' ' -f1)" = "$1" ] && return 0
        sleep 1
    done
    echo "gate_cost: the plain Job never got HTTP $1" >&2
    exit 1
}

# The API server's own background CPU (watches, controllers) over 5 s, in ticks per second, subtracted below.
background_rate() {
    local before
    before=$(cpu_ticks)
    sleep 5
    python3 -c "print(($(cpu_ticks) - $before) / 5)"
}

measure() {
    local phase=$1 job=$2 ticks_before wall=0 codes="" background
    background=$(background_rate)
    ticks_before=$(cpu_ticks)
    for _ in $(seq 1 "$CREATES"); do
        read -r code seconds <<< "$(create "$job")"
        codes="$codes $code"
        wall=$(python3 -c "print($wall + $seconds)")
    done
    python3 - "$phase" "$job" "$codes" "$wall" "$ticks_before" "$(cpu_ticks)" "$(getconf CLK_TCK)" "$CREATES" \
        "$background" "${APISERVER:-}" << 'EOF'
import sys
phase, job, codes, wall, before, after, tick, creates, background, local = sys.argv[1:]
creates = int(creates)
ticks = float(after) - float(before) - float(background) * float(wall)
cpu = f"{max(ticks, 0) / float(tick) / creates:.3f} s" if local else "n/a (API server not local)"
answers = sorted(set(codes.split()))
print(f"| {phase} | {job} | {', '.join(answers)} | {float(wall) / creates:.3f} s | {cpu} |")
EOF
}

echo "| gate | Job | HTTP answers | wall time per create | API server CPU per create |"
echo "|---|---|---|---|---|"
await_plain 201
measure "none" confined
measure "none" plain
measure "none" foreign
kubectl apply --server-side -f "$WORK/TierGateParameters.json" -f "$WORK/ValidatingAdmissionPolicy.json" \
    -f "$WORK/ValidatingAdmissionPolicyBinding.json" > /dev/null
await_plain 403
measure "validating half" confined
measure "validating half" plain
measure "validating half" foreign
SERVED=$(kubectl api-resources --api-group=admissionregistration.k8s.io -o name)
if grep -q '^mutatingadmissionpolicies\.' <<< "$SERVED"; then
    kubectl apply --server-side -f "$WORK/MutatingAdmissionPolicy.json" -f "$WORK/MutatingAdmissionPolicyBinding.json" \
        > /dev/null
    await_plain 201
    measure "both halves" confined
    measure "both halves" plain
    measure "both halves" foreign
else
    echo "(MutatingAdmissionPolicy is not served here: the mutating half is not measured)"
fi
