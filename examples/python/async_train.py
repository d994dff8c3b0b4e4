#!/usr/bin/env python3
"""An asynchronous GRPO-style training loop against rollout-runtime, standard library only.

The service keeps up to ``--groups`` groups in flight in a rollout buffer while the trainer
works: each step takes ``--batch`` complete groups from ``/v1/buffers/:id/take`` (whichever
finished first, or the oldest weight version first with ``--order oldest-version``) on a lease,
runs a fake optimizer step (a sleep of ``--train-ms``), acks the groups it trained on (a trainer
that dies mid-step leaves them unacked: after ``--lease-ms`` they go back in line for the next
one), and publishes the new weights with
``POST /v1/weights {version, trainer_version}`` -- rollouts already running switch to the new
version at their next LLM call. Staleness of each group is the trainer's version when it is
trained on minus the oldest weight version of its tokens.

    rollout serve --port 8006 --backend oracle &
    python3 examples/python/async_train.py --url http://127.0.0.1:8006 \\
        --tasks examples/math.jsonl --steps 4 --batch 2 --groups 4 --n 4

Prints one line per step and, last, one JSON line with the run's figures. Exits 1 when a
trained group breaks a token invariant (see client.py) or a staleness exceeds --max-staleness,
2 on a usage or connection error.
"""

import argparse
import itertools
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from client import Api, BufferError, RolloutBuffer, check_native  # noqa: E402


def load_tasks(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--url", default="http://127.0.0.1:8006")
    p.add_argument("--token", default=os.environ.get("ROLLOUT_TOKEN"))
    p.add_argument("--tasks", required=True, help="JSONL of instances; cycled for as many prompts as the run needs")
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--batch", type=int, default=2, help="groups per optimizer step")
    p.add_argument("--groups", type=int, default=4, help="B: groups the buffer keeps in flight")
    p.add_argument("--n", type=int, default=4)
    p.add_argument("--over-provision", type=int, default=0)
    p.add_argument("--order", choices=("completion", "oldest-version"), default="completion")
    p.add_argument("--dynamic-sampling", action="store_true")
    p.add_argument("--train-ms", type=int, default=200, help="the fake optimizer step's duration")
    p.add_argument("--max-staleness", type=int, default=None, help="fail when a trained group is staler than this")
    p.add_argument("--lease-ms", type=int, default=600_000, help="how long a taken group waits for its ack before it is handed out again (0: take without a lease, at most once)")
    args = p.parse_args(argv)

    api = Api(args.url, args.token)
    try:
        tasks = load_tasks(args.tasks)
        # Enough prompts for every step, plus what dynamic sampling may drop.
        need = args.steps * args.batch * (3 if args.dynamic_sampling else 1) + args.groups
        prompts = [dict(t, instance_id="%s#%d" % (t.get("instance_id", "t"), i)) for i, t in zip(range(need), itertools.cycle(tasks))]
        version = 0
        status, body = api.call("POST", "/v1/weights", {"version": version, "trainer_version": version})
        if status != 200:
            print("POST /v1/weights: HTTP %d %s" % (status, body), file=sys.stderr)
            return 2
        buf = RolloutBuffer(api, groups=args.groups, n=args.n, instances=prompts, over_provision=args.over_provision,
                            order=args.order, dynamic_sampling=args.dynamic_sampling, end=True)
    except (OSError, BufferError, ValueError) as e:
        print("error: %s" % e, file=sys.stderr)
        return 2

    problems = []
    stalenesses = []
    trained = 0
    acked = 0
    t0 = time.monotonic()
    wait_s = 0.0
    try:
        for step in range(1, args.steps + 1):
            batch = []
            w0 = time.monotonic()
            while len(batch) < args.batch:
                got = buf.take(args.batch - len(batch), wait_ms=60_000, lease_ms=args.lease_ms or None)
                if not got and buf.stats["done"]:
                    break
                batch.extend(got)
            wait_s += time.monotonic() - w0
            if not batch:
                break
            for g in batch:
                for r in g["results"]:
                    check_native(r, problems, "%s/%s" % (g["group_id"], r.get("trajectoryId")))
                v = g["min_weight_version"]
                s = version - v if isinstance(v, (int, float)) else None
                if s is not None:
                    stalenesses.append(s)
                    if args.max_staleness is not None and s > args.max_staleness:
                        problems.append("group %s: staleness %d > %d" % (g["group_id"], s, args.max_staleness))
            rewards = [x for g in batch for x in g["rewards"] if x is not None]
            # The fake optimizer step; rollouts keep running on the old weights meanwhile.
            time.sleep(args.train_ms / 1000)
            leases = [g["lease_id"] for g in batch if "lease_id" in g]
            if leases:
                res = buf.ack(leases)
                acked += len(res["acked"])
                if res["unknown"]:
                    problems.append("step %d: %d leases ran out before the ack" % (step, len(res["unknown"])))
            version += 1
            status, body = api.call("POST", "/v1/weights", {"version": version, "trainer_version": version})
            if status != 200:
                problems.append("POST /v1/weights at step %d: HTTP %d" % (step, status))
            trained += len(batch)
            print("step %d: %d groups, mean reward %.3f, staleness %s, buffer in flight %d ready %d dropped %d" % (
                step, len(batch), sum(rewards) / len(rewards) if rewards else 0.0,
                [version - 1 - g["min_weight_version"] if isinstance(g["min_weight_version"], (int, float)) else None for g in batch],
                buf.stats["in_flight"], buf.stats["ready"], buf.stats["dropped"]), file=sys.stderr)
    except (OSError, BufferError) as e:
        print("error: %s" % e, file=sys.stderr)
        buf.close()
        return 2
    elapsed = time.monotonic() - t0
    final = buf.close() or buf.stats
    summary = {
        "steps": version,
        "groups_trained": trained,
        "groups_acked": acked,
        "delivered": final.get("delivered"),
        "returned": final.get("returned"),
        "weight_version": version,
        "mean_staleness": (sum(stalenesses) / len(stalenesses)) if stalenesses else None,
        "max_staleness": max(stalenesses) if stalenesses else None,
        "dropped": final.get("dropped"),
        "cancelled_members": final.get("cancelled_members"),
        "steps_per_min": round(version / elapsed * 60, 2) if elapsed > 0 else None,
        "trainer_wait_fraction": round(wait_s / elapsed, 3) if elapsed > 0 else None,
        "problems": problems[:20],
    }
    print(json.dumps(summary))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
