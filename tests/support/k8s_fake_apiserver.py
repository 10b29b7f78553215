"""A FAKE Kubernetes API server for the tests of orch's kubernetes target. Not Kubernetes.

No real kube-apiserver can be installed on these machines (see ../shared/notes), so the kubernetes target
is driven through the real `kubernetes` Python client against this small server, which speaks the subset
of the REST API the target uses, over real HTTP on loopback:

- create / get / list (labelSelector) / delete of ConfigMaps, Services, Deployments (apps/v1),
  LeaderWorkerSets (leaderworkerset.x-k8s.io/v1; absent with --no-lws, as on a cluster without the CRD),
  ServiceAccounts, Roles and RoleBindings (a prefill/decode pair's router that reads pods);
- garbage collection by ownerReferences: deleting an object deletes its dependents (as the cluster's
  garbage collector does, at once rather than eventually);
- Pods created for each Deployment replica and LeaderWorkerSet group member, with a scripted lifecycle
  per layout (--fate LAYOUT=ready|unschedulable|imagepull|oom|crashloop|never-ready), their status
  conditions and container states shaped as the kubelet reports them, Events, and the container log;
- port-forward (GET .../pods/NAME/portforward upgraded to a WebSocket, channel protocol v4) to the pod.

What it does not do: run container images. A ready leader pod's serving endpoint is played by orch's own
simulated engine (`python -m orchestrator.sim.server`) on a free loopback port, for the model given with
--sim-model and the pod's layout label; worker pods only become Ready. It checks no schema (kubernetes-
validate and Helm do that in other tests), no authentication, no resourceVersion conflicts, no watches.
RBAC is played by --forbid VERB:RESOURCE, answered 403 with the message the real server sends.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from typing import Any

from aiohttp import WSMsgType, web

from tests.support.ports import free_port

Obj = dict[str, Any]

# (API prefix, plural) -> kind
RESOURCES = {
    ("api/v1", "configmaps"): "ConfigMap",
    ("api/v1", "services"): "Service",
    ("api/v1", "pods"): "Pod",
    ("api/v1", "events"): "Event",
    ("apis/apps/v1", "deployments"): "Deployment",
    ("apis/leaderworkerset.x-k8s.io/v1", "leaderworkersets"): "LeaderWorkerSet",
    ("api/v1", "serviceaccounts"): "ServiceAccount",
    ("apis/rbac.authorization.k8s.io/v1", "roles"): "Role",
    ("apis/rbac.authorization.k8s.io/v1", "rolebindings"): "RoleBinding",
}
CRASH_LOG = [
    "INFO 12-04 10:00:01 [api_server.py:1] vLLM API server version 0.32.0",
    "INFO 12-04 10:00:09 [gpu_model_runner.py:2] Loading model weights took 67.5 GiB",
    "ValueError: The model's max seq len (131072) is larger than the maximum number of tokens that can be "
    "stored in KV cache (65536). Try increasing `gpu_memory_utilization` or decreasing `max_model_len`.",
]


def _status(code: int, reason: str, message: str) -> web.Response:
    body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message,
            "reason": reason, "code": code}  # fmt: skip
    return web.json_response(body, status=code)


def _matches(labels: dict[str, str], selector: str) -> bool:
    for term in filter(None, selector.split(",")):
        key, eq, value = term.partition("=")
        if (labels.get(key) != value) if eq else (key not in labels):
            return False
    return True


def _served_name(argv: list[str]) -> str:
    for flag in ("--served-model-name", "--model-path", "--model"):
        if flag in argv and argv.index(flag) + 1 < len(argv):
            return argv[argv.index(flag) + 1]
    if "serve" in argv and argv.index("serve") + 1 < len(argv):
        return argv[argv.index("serve") + 1]
    return "model"


class FakeCluster:
    def __init__(self, args: argparse.Namespace) -> None:
        self.objects: dict[tuple[str, str, str], Obj] = {}  # (plural, namespace, name) -> object
        self.sims: dict[str, subprocess.Popen[bytes]] = {}  # pod uid -> simulated engine
        self.fates = dict(f.split("=", 1) for f in args.fate)
        self.forbidden = set(args.forbid)
        self.lws = not args.no_lws
        self.sim_model, self.sim_gpu = args.sim_model, args.sim_gpu
        self.counter = itertools.count(1)
        self.tasks: set[asyncio.Task[None]] = set()

    # -- objects ------------------------------------------------------------------------------------
    def _store(self, plural: str, ns: str, obj: Obj) -> Obj:
        meta = obj.setdefault("metadata", {})
        meta.update(namespace=ns, uid=str(uuid.uuid4()), resourceVersion=str(next(self.counter)),
                    creationTimestamp=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))  # fmt: skip
        self.objects[(plural, ns, meta["name"])] = obj
        return obj

    def create(self, plural: str, ns: str, obj: Obj) -> Obj:
        stored = self._store(plural, ns, obj)
        if plural == "deployments":
            spec = obj["spec"]
            for i in range(int(spec.get("replicas", 1))):
                self._pod(ns, f"{obj['metadata']['name']}-{uuid.uuid4().hex[:10]}-{i}", spec["template"], obj)
        elif plural == "leaderworkersets":
            tmpl = obj["spec"]["leaderWorkerTemplate"]
            for g in range(int(obj["spec"].get("replicas", 1))):
                base = f"{obj['metadata']['name']}-{g}"
                self._pod(ns, base, tmpl["leaderTemplate"], obj)
                for k in range(1, int(tmpl.get("size", 1))):
                    self._pod(ns, f"{base}-{k}", tmpl["workerTemplate"], obj)
        return stored

    def _pod(self, ns: str, name: str, template: Obj, owner: Obj) -> None:
        meta = owner["metadata"]
        pod: Obj = {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": dict(template["metadata"]["labels"]),
                         "ownerReferences": [{"apiVersion": owner["apiVersion"], "kind": owner["kind"],
                                              "name": meta["name"], "uid": meta["uid"]}]},
            "spec": template["spec"],
            "status": {"phase": "Pending", "conditions": []},
        }  # fmt: skip
        self._store("pods", ns, pod)
        task = asyncio.get_running_loop().create_task(self._lifecycle(ns, pod))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def delete(self, plural: str, ns: str, name: str) -> Obj | None:
        obj = self.objects.pop((plural, ns, name), None)
        if obj is None:
            return None
        uid = obj["metadata"]["uid"]
        sim = self.sims.pop(uid, None)
        if sim is not None:
            sim.terminate()
            # Reaped off the event loop, which must not block here.
            asyncio.get_running_loop().run_in_executor(None, sim.wait)
        for (p, n, other), dep in list(self.objects.items()):
            if any(ref.get("uid") == uid for ref in dep["metadata"].get("ownerReferences", [])):
                self.delete(p, n, other)
        return obj

    # -- pods ---------------------------------------------------------------------------------------
    def _event(self, ns: str, pod: Obj, reason: str, message: str) -> None:
        name = pod["metadata"]["name"]
        self._store("events", ns, {
            "apiVersion": "v1", "kind": "Event", "metadata": {"name": f"{name}.{next(self.counter)}"},
            "involvedObject": {"kind": "Pod", "name": name, "namespace": ns},
            "type": "Warning" if reason.startswith(("Failed", "BackOff")) else "Normal",
            "reason": reason, "message": message,
        })  # fmt: skip

    def _alive(self, ns: str, pod: Obj) -> bool:
        return self.objects.get(("pods", ns, pod["metadata"]["name"])) is pod

    async def _lifecycle(self, ns: str, pod: Obj) -> None:
        st, container = pod["status"], pod["spec"]["containers"][0]
        fate = self.fates.get(pod["metadata"]["labels"].get("orch.dev/layout", ""), "ready")
        await asyncio.sleep(0.2)
        if fate == "unschedulable":
            gpus = container.get("resources", {}).get("limits", {}).get("nvidia.com/gpu", 0)
            msg = (
                f"0/3 nodes are available: 3 Insufficient nvidia.com/gpu (pod asks {gpus}, nodes have 8). "
                "preemption: 0/3 nodes are available: 3 No preemption victims found for incoming pod."
            )
            st["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                 "message": msg}]  # fmt: skip
            self._event(ns, pod, "FailedScheduling", msg)
            return
        st["conditions"] = [{"type": "PodScheduled", "status": "True"}]
        name, image = container["name"], container["image"]
        base = {"name": name, "image": image, "imageID": "", "ready": False, "restartCount": 0}
        if fate == "imagepull":
            msg = f'Failed to pull image "{image}": rpc error: code = NotFound desc = {image}: not found'
            st["containerStatuses"] = [
                base | {"state": {"waiting": {"reason": "ErrImagePull", "message": msg}}}
            ]
            self._event(ns, pod, "Failed", msg)
            await asyncio.sleep(0.3)
            back = f'Back-off pulling image "{image}"'
            st["containerStatuses"] = [
                base | {"state": {"waiting": {"reason": "ImagePullBackOff", "message": back}}}
            ]
            return
        st["phase"] = "Running"
        st["podIP"] = f"10.0.0.{next(self.counter) % 250 + 2}"
        st["containerStatuses"] = [base | {"state": {"running": {"startedAt": "2026-12-04T10:00:00Z"}}}]
        if fate in ("oom", "crashloop"):
            await asyncio.sleep(0.3)
            reason, code = ("OOMKilled", 137) if fate == "oom" else ("Error", 1)
            st["containerStatuses"] = [base | {
                "restartCount": 2,
                "state": {"waiting": {"reason": "CrashLoopBackOff",
                                      "message": f"back-off 20s restarting failed container={name}"}},
                "lastState": {"terminated": {"reason": reason, "exitCode": code}},
            }]  # fmt: skip
            self._event(ns, pod, "BackOff", f"Back-off restarting failed container {name}")
            return
        if fate == "never-ready" or not container.get("ports"):
            if fate != "never-ready":  # a worker rank: no endpoint of its own
                self._ready(pod, base)
            return
        port = free_port()
        layout = re.sub(r"x\d+$", "", pod["metadata"]["labels"].get("orch.dev/layout", "tp1"))
        if "." in layout:  # a prefill/decode pair's router pod (p-tp2.d-tp2): played by one as well
            layout = "tp1"
        argv = [sys.executable, "-m", "orchestrator.sim.server", "--model", self.sim_model,
                "--gpu", self.sim_gpu, "--layout", layout,
                "--served-model-name", _served_name(container.get("command", [])),
                "--host", "127.0.0.1", "--port", str(port)]  # fmt: skip
        sim = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        self.sims[pod["metadata"]["uid"]] = sim
        pod["_sim_port"] = port
        while self._alive(ns, pod) and sim.poll() is None:
            with contextlib.suppress(OSError):
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                writer.write(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                line = await reader.readline()
                writer.close()
                if b" 200 " in line:
                    self._ready(pod, base)
                    return
            await asyncio.sleep(0.2)

    @staticmethod
    def _ready(pod: Obj, base: Obj) -> None:
        st = pod["status"]
        st["containerStatuses"] = [
            base | {"ready": True, "state": {"running": {"startedAt": "2026-12-04T10:00:00Z"}}}
        ]
        st["conditions"] = [{"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": "True"}]

    def shutdown(self) -> None:
        for sim in self.sims.values():
            sim.terminate()
        for sim in self.sims.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                sim.wait(timeout=10)


def _public(obj: Obj) -> Obj:
    return {k: v for k, v in obj.items() if not k.startswith("_")}


def make_app(cluster: FakeCluster) -> web.Application:
    routes = web.RouteTableDef()

    def resource(request: web.Request) -> tuple[str, str, str] | web.Response:
        prefix, plural = request.match_info["prefix"], request.match_info["plural"]
        if (prefix, plural) not in RESOURCES or (plural == "leaderworkersets" and not cluster.lws):
            return _status(404, "NotFound", "the server could not find the requested resource")
        verb = {"POST": "create", "DELETE": "delete", "GET": "get"}[request.method]
        if request.method == "GET" and "name" not in request.match_info:
            verb = "list"
        if f"{verb}:{plural}" in cluster.forbidden:
            group = prefix.split("/")[1] if prefix.startswith("apis/") else ""
            return _status(
                403,
                "Forbidden",
                f'{plural} is forbidden: User "system:serviceaccount:ci:orch" cannot '
                f'{verb} resource "{plural}" in API group "{group}" in the namespace '
                f'"{request.match_info["ns"]}"',
            )
        return prefix, plural, request.match_info["ns"]

    base = r"/{prefix:api/v1|apis/[^/]+/[^/]+}/namespaces/{ns}/{plural}"

    @routes.post(base)
    async def create(request: web.Request) -> web.StreamResponse:
        res = resource(request)
        if isinstance(res, web.Response):
            return res
        _, plural, ns = res
        obj = await request.json()
        name = obj.get("metadata", {}).get("name", "")
        if (plural, ns, name) in cluster.objects:
            return _status(409, "AlreadyExists", f'{plural} "{name}" already exists')
        return web.json_response(_public(cluster.create(plural, ns, obj)), status=201)

    @routes.get(base)
    async def list_(request: web.Request) -> web.StreamResponse:
        res = resource(request)
        if isinstance(res, web.Response):
            return res
        _, plural, ns = res
        selector = request.query.get("labelSelector", "")
        field = request.query.get("fieldSelector", "")
        items = [
            _public(o)
            for (p, n, _), o in cluster.objects.items()
            if p == plural and n == ns and _matches(o["metadata"].get("labels", {}), selector)
        ]
        if field.startswith("involvedObject.name="):
            items = [o for o in items if o.get("involvedObject", {}).get("name") == field.split("=", 1)[1]]
        return web.json_response(
            {
                "kind": RESOURCES[(res[0], plural)] + "List",
                "apiVersion": "v1",
                "metadata": {"resourceVersion": str(next(cluster.counter))},
                "items": items,
            }
        )

    @routes.get(base + "/{name}")
    async def get(request: web.Request) -> web.StreamResponse:
        res = resource(request)
        if isinstance(res, web.Response):
            return res
        obj = cluster.objects.get((res[1], res[2], request.match_info["name"]))
        if obj is None:
            return _status(404, "NotFound", f'{res[1]} "{request.match_info["name"]}" not found')
        return web.json_response(_public(obj))

    @routes.delete(base + "/{name}")
    async def delete(request: web.Request) -> web.StreamResponse:
        res = resource(request)
        if isinstance(res, web.Response):
            return res
        obj = cluster.delete(res[1], res[2], request.match_info["name"])
        if obj is None:
            return _status(404, "NotFound", f'{res[1]} "{request.match_info["name"]}" not found')
        # As the real server does for these kinds: the object, now marked for deletion.
        obj["metadata"]["deletionTimestamp"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        return web.json_response(_public(obj))

    @routes.get("/api/v1/namespaces/{ns}/pods/{name}/log")
    async def log(request: web.Request) -> web.StreamResponse:
        pod = cluster.objects.get(("pods", request.match_info["ns"], request.match_info["name"]))
        if pod is None:
            return _status(404, "NotFound", f'pods "{request.match_info["name"]}" not found')
        tail = int(request.query.get("tailLines", "100"))
        return web.Response(text="\n".join(CRASH_LOG[-tail:]) + "\n")

    @routes.get("/api/v1/namespaces/{ns}/pods/{name}/portforward")
    async def portforward(request: web.Request) -> web.StreamResponse:
        pod = cluster.objects.get(("pods", request.match_info["ns"], request.match_info["name"]))
        if pod is None or "_sim_port" not in pod:
            return _status(404, "NotFound", f'pods "{request.match_info["name"]}" not found or not serving')
        port = int(request.query["ports"])
        ws = web.WebSocketResponse(protocols=("v4.channel.k8s.io",))
        await ws.prepare(request)
        prefix = port.to_bytes(2, "little")
        await ws.send_bytes(b"\x00" + prefix)  # data channel, then error channel: the port, as kubelet does
        await ws.send_bytes(b"\x01" + prefix)
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", pod["_sim_port"])
        except OSError as exc:
            await ws.send_bytes(b"\x01" + f"error forwarding port {port}: {exc}".encode())
            await ws.close()
            return ws

        async def upstream() -> None:
            while data := await reader.read(65536):
                await ws.send_bytes(b"\x00" + data)
            await ws.close()

        pump = asyncio.create_task(upstream())
        async for msg in ws:
            if msg.type == WSMsgType.BINARY and msg.data[:1] == b"\x00" and len(msg.data) > 1:
                writer.write(msg.data[1:])
                await writer.drain()
        pump.cancel()
        writer.close()
        return ws

    app = web.Application()
    app.add_routes(routes)
    return app


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--port-file", required=True, help="written with the chosen port once listening")
    p.add_argument("--fate", action="append", default=[], metavar="LAYOUT=FATE")
    p.add_argument("--forbid", action="append", default=[], metavar="VERB:RESOURCE")
    p.add_argument("--no-lws", action="store_true", help="act as a cluster without the LeaderWorkerSet CRD")
    p.add_argument("--sim-model", default="qwen2.5-7b")
    p.add_argument("--sim-gpu", default="h100-sxm")
    args = p.parse_args()
    cluster = FakeCluster(args)

    async def serve() -> None:
        runner = web.AppRunner(make_app(cluster), access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        tmp = args.port_file + ".tmp"
        with open(tmp, "w") as fh:
            fh.write(str(port))
        os.replace(tmp, args.port_file)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        cluster.shutdown()
        await runner.cleanup()

    asyncio.run(serve())


if __name__ == "__main__":
    main()
